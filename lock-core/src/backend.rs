//! The backend trait: the minimum a lock server must do atomically, and its optional abilities.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::name::LockName;
use crate::owner::OwnerToken;
use crate::profile::BackendProfile;

/// What a backend does atomically: acquire once, extend, release — each bound to the caller's own
/// [`OwnerToken`].
///
/// Everything else — blocking waits, deadlines, backoff, reentrancy, lease renewal, guards — is
/// written once in this crate ([`LockClient`](crate::LockClient)), never per backend.
///
/// # Contract
/// - **Exclusivity.** While a [`Lease`](Self::Lease) returned by
///   [`try_acquire`](Self::try_acquire) is valid, no other call to `try_acquire` for the same name
///   — from this process or any other, through any client of the same servers — returns a lease.
/// - **Token binding.** `extend` and `release` act only if the lock is still held under the
///   owner token it was acquired with; otherwise they change nothing and return `Ok(false)`. Check
///   and act happen in one atomic step on the server (a script, a statement, a transaction).
/// - **Leases.** For [`HoldKind::Lease`] backends, a lock acquired or extended with `ttl` is
///   released by the server on its own `ttl` after the request, unless extended again; the expiry
///   is set by the same atomic step that acquires, so a crash can never leave an immortal lock.
///   For [`HoldKind::Session`] backends the hold lives exactly as long as a server-side session or
///   connection; `ttl` may shape the session timeout and `extend` checks that the session is alive.
/// - **Contention is not an error.** A lock held by someone else is `Ok(None)`.
/// - **No hangs.** Every call — a batch included — returns within one connect and one read
///   timeout of the backend (a stopped server must not cost a timeout per batch item).
/// - **Bad leases are typed errors.** `try_acquire` and `extend` reject a `ttl` that
///   [`check_lease`](crate::check_lease) rejects with [`Error::InvalidConfig`](crate::Error::InvalidConfig).
/// - **Abilities are declared.** A backend that implements [`NativeWait`] or [`Fencing`] must also
///   return `Some(self)` from [`native_wait`](Self::native_wait) or [`fencing`](Self::fencing):
///   that is how the generic lock finds them (forgetting it silently loses the ability).
///
/// # Errors
/// All methods return [`Error::Connection`](crate::Error::Connection) or
/// [`Error::Timeout`](crate::Error::Timeout) when the server cannot be reached in time, and
/// [`Error::Backend`](crate::Error::Backend) for anything else the server reports.
pub trait DistributedLock: Send + Sync + 'static {
    /// What the backend keeps for one successful acquisition: the token and key, or (for holds
    /// bound to a transaction or session) the connection that holds it.
    type Lease: Send + 'static;

    /// A short label for logs and errors (`"memory"`, `"redis"`, …).
    fn backend_name(&self) -> &'static str;

    /// Which of the backend's lock layouts this is (`"redis-hash"`, `"pg-row"`, …): the `kind`
    /// label of metrics and spans. Defaults to [`backend_name`](Self::backend_name).
    fn kind_name(&self) -> &'static str {
        self.backend_name()
    }

    /// How this backend's holds end without a release.
    fn hold_kind(&self) -> HoldKind {
        HoldKind::Lease
    }

    /// How much of `ttl` this backend cannot vouch for, clock drift aside (ZooKeeper: all past the
    /// session timeout, after which the servers may expire the session whatever the lease says).
    ///
    /// Defaults to zero. The core takes the clock-drift margin
    /// ([`LockOptions::clock_drift`](crate::LockOptionsBuilder::clock_drift)) off what is left,
    /// so the guard's [`is_held`](crate::LockGuard::is_held) and the renewal thread's give-up
    /// point count the lease as `ttl − margin − drift(ttl − margin)`.
    fn lease_margin(&self, ttl: Duration) -> Duration {
        let _ = ttl;
        Duration::ZERO
    }

    /// Whether this client's session is known to be broken right now, before any liveness check
    /// says so (ZooKeeper's `Disconnected`): every [`HoldKind::Session`] hold of this backend is
    /// then [`HoldState::InDoubt`](crate::HoldState::InDoubt) — Curator's SUSPENDED — until the
    /// session is back. Called by [`LockGuard::state`](crate::LockGuard::state) and
    /// [`is_held`](crate::LockGuard::is_held): it must not do I/O or block.
    ///
    /// Defaults to `false`: doubt then comes from failed liveness checks only.
    fn session_suspended(&self) -> bool {
        false
    }

    /// The flag through which this backend puts a lease hold in doubt without I/O (see
    /// [`DoubtSignal`](crate::DoubtSignal)): a replicated deployment raises it when the lease's
    /// primary stops answering, since a failover may promote a replica that never got the lease,
    /// and clears it when an extension is confirmed. Asked once per acquisition.
    ///
    /// Defaults to `None`: a lease is doubted only by its own clock.
    fn doubt_signal(&self, lease: &Self::Lease) -> Option<crate::DoubtSignal> {
        let _ = lease;
        None
    }

    /// How this backend works, in words, for reports that compare backends (`distlock
    /// compare`): the source of its fencing tokens, what wakes its waiters, what a failover does.
    ///
    /// Defaults to a profile that says "not described".
    fn profile(&self) -> BackendProfile {
        BackendProfile::default()
    }

    /// Tries once to acquire `name` for `owner` with a lease of `ttl`.
    ///
    /// Returns `Ok(None)` when another owner holds the lock.
    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<Self::Lease>>;

    /// Extends the lease to `ttl` from now if `lease` still holds the lock.
    ///
    /// Returns `Ok(false)`, changing nothing, when the lock is no longer held under this lease.
    fn extend(&self, lease: &mut Self::Lease, ttl: Duration) -> Result<bool>;

    /// Extends many leases at once; the renewal I/O threads call this with a client's leases due.
    ///
    /// The default calls [`extend`](Self::extend) for each. Backends that can batch (one pipeline
    /// per connection instead of one round trip per lease) should override it. The result must
    /// have exactly one entry per item of `batch`, in order; the renewal treats any other
    /// length as a failed renewal of the whole batch.
    fn extend_many(&self, batch: &mut [Extension<'_, Self::Lease>]) -> Vec<Result<bool>> {
        batch.iter_mut().map(|item| self.extend(item.lease, item.ttl)).collect()
    }

    /// Whether each lease is extended on a connection of its own (session holds that own their
    /// connection: SQL row and advisory locks). The renewal then calls [`extend`](Self::extend)
    /// for the leases of a batch concurrently, each on its own thread and locking only its own
    /// lease, instead of [`extend_many`](Self::extend_many): a batch of 1,000 holds against a
    /// silent server returns within one I/O timeout, and a release never waits for another
    /// lease's check.
    ///
    /// Defaults to `false` (one `extend_many` call per batch).
    fn extends_independently(&self) -> bool {
        false
    }

    /// Releases the lock if `lease` still holds it.
    ///
    /// Returns `Ok(false)`, changing nothing, when the lock was no longer held under this lease.
    fn release(&self, lease: Self::Lease) -> Result<bool>;

    /// This backend's [`NativeWait`] ability, if it has one: waiters are then woken by the server
    /// (pub/sub, watches, database lock waits) instead of backing off.
    ///
    /// Defaults to `None`. A backend that implements [`NativeWait`] returns `Some(self)`.
    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = Self::Lease>> {
        None
    }

    /// This backend's [`Fencing`] ability, if it has one.
    ///
    /// Defaults to `None`. A backend that implements [`Fencing`] returns `Some(self)`.
    fn fencing(&self) -> Option<&dyn Fencing<Lease = Self::Lease>> {
        None
    }

    /// This backend's [`ReadWrite`](crate::ReadWrite) ability, if it has one.
    ///
    /// Defaults to `None`: [`ReadWriteLock`](crate::ReadWriteLock)s of this backend then fail
    /// with [`Error::Unsupported`](crate::Error::Unsupported).
    fn read_write(&self) -> Option<&dyn crate::ReadWrite<Lease = Self::Lease>> {
        None
    }

    /// This backend's [`Permits`](crate::Permits) ability, if it has one.
    ///
    /// Defaults to `None`: [`Semaphore`](crate::Semaphore)s of this backend then fail with
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    fn permits(&self) -> Option<&dyn crate::Permits<Lease = Self::Lease>> {
        None
    }

    /// This backend's [`Elections`](crate::Elections) ability, if it has one.
    ///
    /// Defaults to `None`: [`Election`](crate::Election)s of this backend then fail with
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    fn elections(&self) -> Option<&dyn crate::Elections<Lease = Self::Lease>> {
        None
    }

    /// Why this backend has no [`ReadWrite`](crate::ReadWrite) or [`Permits`](crate::Permits)
    /// ability, in words for reports (`"GET_LOCK has no shared mode"`); `None` when it has both.
    fn missing_abilities(&self) -> Option<&'static str> {
        None
    }
}

/// One lease to extend, with the lease duration to extend it to.
#[derive(Debug)]
#[non_exhaustive]
pub struct Extension<'a, L> {
    /// The lease.
    pub lease: &'a mut L,
    /// The new lease duration, counted from the server's receipt of the request.
    pub ttl: Duration,
}

impl<'a, L> Extension<'a, L> {
    /// One item of an [`extend_many`](DistributedLock::extend_many) batch.
    pub fn new(lease: &'a mut L, ttl: Duration) -> Self {
        Self { lease, ttl }
    }
}

/// How a backend's holds end when the holder stops extending them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldKind {
    /// The server drops the lock when its lease runs out (Redis key TTL, lock-table expiry).
    Lease,
    /// The lock lives as long as a server session or connection (row locks, advisory locks,
    /// ZooKeeper ephemeral nodes). [`extend`](DistributedLock::extend) is the liveness check and
    /// the lease is how long checks may fail: a failed check puts the hold in doubt, and no
    /// successful check for a whole lease makes it lost (Curator's SUSPENDED → LOST), with
    /// renewal on or off. A backend whose server can end an idle session by itself sets that
    /// limit to the lease, so a cut-off holder's lock is freed soon after the holder is told.
    Session,
}

/// Optional ability: block until the lock is acquired, woken by the server.
///
/// Blocking [`Lock::lock`](crate::Lock::lock) and the timed `try_lock_*` methods use this when
/// the backend offers it, and capped exponential backoff over
/// [`DistributedLock::try_acquire`] otherwise.
pub trait NativeWait: DistributedLock {
    /// Acquires `name` for `owner`, waiting until `deadline` (forever if `None`).
    ///
    /// Returns `Ok(None)` if the deadline passed first. Implementations must re-check the lock on
    /// their own now and then, so that a lost wake-up message delays a waiter but never strands it
    /// — but not much more often than once a second: a wait that re-checks every few milliseconds
    /// is polling, and the hand-off scenario (S11) is there to tell the difference.
    ///
    /// Returns by `deadline` plus at most one I/O timeout: clean-up after a failed or timed-out
    /// wait (leaving a queue, undoing a partial grant) is bounded by the time left, or deferred.
    ///
    /// # Errors
    /// As [`DistributedLock::try_acquire`].
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<Self::Lease>>>;
}

/// A lease won by a waiting acquisition, with the moment its winning request was sent.
///
/// The lease's expiry is counted from that moment, not from the (later) moment the caller learns
/// of it: a holder must never believe its lease lasts longer than the server does.
#[derive(Debug)]
#[non_exhaustive]
pub struct Acquired<L> {
    /// The lease.
    pub lease: L,
    /// When the request that acquired it was sent.
    pub sent_at: Instant,
    /// Whether another owner held the lock when it was first asked for, so the acquisition had
    /// to wait (the `distlock_acquisitions_contended_total` metric).
    pub contended: bool,
}

impl<L> Acquired<L> {
    /// A lease acquired by a request sent at `sent_at`, granted at the first ask.
    pub fn new(lease: L, sent_at: Instant) -> Self {
        Self { lease, sent_at, contended: false }
    }

    /// The same acquisition, marked as one that had to wait when `waited` is true.
    pub fn contended_if(mut self, waited: bool) -> Self {
        self.contended |= waited;
        self
    }
}

/// Optional ability: every acquisition carries a [`FencingToken`].
///
/// # Contract
/// Tokens for one name strictly increase across holders, lease expiries and client restarts; the
/// token is produced by the same atomic step that acquires.
pub trait Fencing: DistributedLock {
    /// The token issued with `lease`.
    fn fencing_token(&self, lease: &Self::Lease) -> FencingToken;
}

/// A number that strictly increases with every acquisition of one lock name.
///
/// Pass it with every write to the resource the lock protects; the resource remembers the highest
/// token it has seen and rejects writes carrying a lower one. That is what keeps a holder that was
/// paused past its lease from overwriting the next holder's work (the docs' GC-pause story).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// A token with this value.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The token's value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
