//! [`EtcdBackend`]: the [`DistributedLock`] over one client and its lease, its liveness checks
//! and release.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lock_core::{
    check_lease, Acquired, DistributedLock, Error, Extension, Fencing, FencingToken, HoldKind, LockName,
    NativeWait, OwnerToken, Result, WriteHolds,
};

use crate::blocking::{async_context_error, in_async_context, refuse_async_context};
use crate::builder::{EtcdLockBuilder, Settings};
use crate::error::BACKEND;
use crate::keep_alive::ClientLease;
use crate::keys::{contenders_range, Namespace};
use crate::lease::{revision_token, EtcdLease, Held};
use crate::mutex::{delete_if_revision, Wait, Won};
use crate::read_write::SharedKey;
use crate::session::Session;
use crate::slots::LocalSlots;

/// The largest clock-drift factor lock-core accepts
/// ([`clock_drift`](lock_core::LockOptionsBuilder::clock_drift)), which a new hold's start
/// allows for (see [`EtcdBackend::hold_start`]).
const MAX_DRIFT: f64 = 0.1;

/// Locks on an etcd cluster, in the layout of etcd's own `concurrency.Mutex` (and so of
/// `etcdctl lock`).
///
/// Build it with [`EtcdBackend::builder`] (or [`from_url`](Self::from_url)) and hand it to a
/// [`LockClient`](lock_core::LockClient). Clones share one connection, one lease and its
/// runtime thread.
///
/// Holds are [`HoldKind::Session`]: a lock is held as long as its key, which lives as long as
/// the client's lease. Renewal is a liveness check: one keep-alive on the client's one stream
/// per batch, however many locks. A broken stream puts the holds in doubt, and a hold is lost
/// once no keep-alive was confirmed for the lease's TTL (or the lock's lease, if shorter) less
/// a clock-drift margin — before etcd can have expired the lease — or at once when etcd says
/// the lease is gone. A lost lease is replaced by a new one for later acquisitions.
///
/// Calls block; from a tokio async task they return [`Error::Unsupported`] (use
/// `tokio::task::spawn_blocking`). A release refused there is still sent, in the background.
///
/// Abilities: [`NativeWait`] (each waiter watches its predecessor's key), [`Fencing`] (the
/// key's create revision), [`ReadWrite`](lock_core::ReadWrite) (etcd's `recipe.RWMutex` layout)
/// and [`Permits`](lock_core::Permits).
///
/// ```no_run
/// use lock_core::LockClient;
/// use lock_etcd::EtcdBackend;
///
/// let backend = EtcdBackend::builder("10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379").build()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("orders")?.lock()?; // the key orders/<lease hex>
/// guard.unlock()?;
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct EtcdBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) session: Session,
    pub(crate) namespace: Namespace,
    pub(crate) slots: Arc<LocalSlots>,
    /// The write locks held, for their owners' downgrades (see [`crate::read_write`]).
    pub(crate) writers: WriteHolds<Weak<SharedKey>>,
    /// How many times a waiter of this backend was woken by a watch.
    pub(crate) wake_ups: AtomicU64,
}

impl EtcdBackend {
    /// Starts building a backend for the cluster at `endpoints` (`host:port[,host:port…]`,
    /// every member listed; a host without a port gets etcd's 2379).
    pub fn builder(endpoints: impl Into<String>) -> EtcdLockBuilder {
        EtcdLockBuilder::new(endpoints)
    }

    /// A backend built with every default from a URL: shorthand for
    /// [`EtcdLockBuilder::from_url`] and [`build`](EtcdLockBuilder::build).
    ///
    /// # Errors
    /// As those two.
    pub fn from_url(url: &str) -> Result<Self> {
        EtcdLockBuilder::from_url(url)?.build()
    }

    pub(crate) fn open(settings: Settings, namespace: Namespace) -> Result<Self> {
        let session = Session::open(settings)?;
        let slots = Arc::new(LocalSlots::default());
        let writers = WriteHolds::default();
        let wake_ups = AtomicU64::new(0);
        Ok(Self { inner: Arc::new(Inner { session, namespace, slots, writers, wake_ups }) })
    }

    /// The namespace (key prefix) under which this backend's locks live; `""` for none.
    pub fn namespace(&self) -> &str {
        self.inner.namespace.as_str()
    }

    /// The key prefix of the lock `name`: `etcdctl lock <prefix>` contends for the same lock.
    pub fn lock_prefix(&self, name: &LockName) -> String {
        self.inner.namespace.lock_prefix(name)
    }

    /// The key prefix of the election `name` (`[namespace/]%election/<name>`): `etcdctl elect
    /// <prefix> <proposal>` and Go's `concurrency.NewElection(session, prefix)` campaign in the
    /// same election.
    pub fn election_prefix(&self, name: &LockName) -> String {
        self.inner.namespace.election_prefix(name)
    }

    /// The id of the client's current lease (the one new acquisitions use).
    pub fn lease_id(&self) -> i64 {
        self.inner.session.current_lease().id
    }

    /// The TTL etcd granted the current lease (whole seconds, raised to etcd's minimum).
    pub fn session_ttl(&self) -> Duration {
        self.inner.session.current_lease().ttl
    }

    /// How many keep-alive requests this backend has sent (every lease, every stream): the
    /// whole of its renewal traffic.
    pub fn keep_alive_requests(&self) -> u64 {
        self.inner.session.keep_alive_requests()
    }

    /// How many times a waiter of this backend was woken by the deletion of its predecessor.
    pub fn wake_ups(&self) -> u64 {
        self.inner.wake_ups.load(Ordering::Relaxed)
    }

    /// The keys contending for `name`, holder first, each with its create revision.
    ///
    /// # Errors
    /// As any request.
    pub fn contenders(&self, name: &LockName) -> Result<Vec<(String, i64)>> {
        refuse_async_context()?;
        let session = &self.inner.session;
        let range = contenders_range(&self.lock_prefix(name));
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_sort(etcd_client::SortTarget::Create, etcd_client::SortOrder::Ascend);
        let found = session
            .get(self.io_deadline(), range, Some(options))
            .map_err(|failure| failure.into_error("list the contenders"))?;
        let listed = found
            .kvs()
            .iter()
            .map(|kv| (String::from_utf8_lossy(kv.key()).into_owned(), kv.create_revision()));
        Ok(listed.collect())
    }

    /// The holder's key and create revision — its fencing token — if `name` is held.
    ///
    /// # Errors
    /// As any request.
    pub fn holder(&self, name: &LockName) -> Result<Option<(String, u64)>> {
        let holder = self.contenders(name)?.into_iter().next();
        Ok(holder.map(|(key, revision)| (key, revision_token(revision).get())))
    }

    /// Takes `name` away from its holder as an operator would with `etcdctl lease revoke`:
    /// revokes the lease of the holder's key, so every lock of that client is lost (its guards
    /// learn at their next liveness check). For tests and emergencies.
    ///
    /// # Errors
    /// As any request.
    pub fn break_lock(&self, name: &LockName) -> Result<()> {
        refuse_async_context()?;
        let session = &self.inner.session;
        let Some((key, _)) = self.contenders(name)?.into_iter().next() else { return Ok(()) };
        let found = session
            .get(self.io_deadline(), key, None)
            .map_err(|failure| failure.into_error("read the holder"))?;
        let Some(lease) = found.kvs().first().map(etcd_client::KeyValue::lease).filter(|lease| *lease != 0)
        else {
            return Ok(());
        };
        match session.revoke(self.io_deadline(), lease) {
            Ok(_) => Ok(()),
            Err(failure) if failure.is_lease_gone() => Ok(()),
            Err(failure) => Err(failure.into_error("revoke the holder's lease")),
        }
    }

    /// One I/O timeout from now: the deadline of a single request.
    pub(crate) fn io_deadline(&self) -> Instant {
        Instant::now() + self.inner.session.settings().io_timeout
    }

    /// When a hold confirmed by a request sent at `confirmed_at` may be counted from, for a lock
    /// with the lease `ttl`. lock-core believes a hold for `min(ttl, TTL)` less its drift
    /// margin after that instant; etcd vouches for the lease until its last confirmed keep-alive
    /// (sent at `K`) plus the TTL, by its own clock. So the start is `K + (TTL − min(ttl, TTL))
    /// × (1 − 0.1)` at the latest, 0.1 being the largest clock drift lock-core accepts: the hold
    /// then ends by the time etcd could expire the lease, whatever the drift setting.
    pub(crate) fn hold_start(lease: &ClientLease, ttl: Duration, confirmed_at: Instant) -> Instant {
        let view = lease.view();
        let lease_ttl = view.vouched_until.saturating_duration_since(view.confirmed_at);
        let believed = ttl.min(lease_ttl);
        let latest = view.confirmed_at + (lease_ttl - believed).mul_f64(1.0 - MAX_DRIFT);
        confirmed_at.min(latest)
    }

    /// One liveness check per distinct lease of `leases`, all by one deadline: `Ok(true)` when a
    /// keep-alive sent after the check began is confirmed, `Ok(false)` when the lease is lost.
    fn check_leases(&self, leases: &[&Arc<ClientLease>]) -> Vec<Result<bool>> {
        let session = &self.inner.session;
        let since = Instant::now();
        let deadline = since + session.settings().io_timeout;
        let mut checked: Vec<(i64, Result<bool>)> = Vec::new();
        leases
            .iter()
            .map(|lease| {
                if let Some((_, outcome)) = checked.iter().find(|(id, _)| *id == lease.id) {
                    return clone_outcome(outcome);
                }
                let outcome = match lease.is_lost() {
                    true => Ok(false),
                    false => match session.wait_until(deadline, lease.confirmed_since(since)) {
                        Some(Ok(())) => Ok(true),
                        Some(Err(_)) => Ok(false),
                        None => Err(Error::Timeout {
                            backend: BACKEND,
                            operation: "confirm the lease",
                            source: Some("no keep-alive was answered within the I/O timeout".into()),
                        }),
                    },
                };
                checked.push((lease.id, clone_outcome(&outcome)));
                outcome
            })
            .collect()
    }
}

/// A copy of a check's outcome, for every hold on the same lease.
fn clone_outcome(outcome: &Result<bool>) -> Result<bool> {
    match outcome {
        Ok(held) => Ok(*held),
        Err(error) => Err(Error::Timeout {
            backend: BACKEND,
            operation: "confirm the lease",
            source: Some(error.to_string().into()),
        }),
    }
}

impl DistributedLock for EtcdBackend {
    type Lease = EtcdLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn profile(&self) -> lock_core::BackendProfile {
        lock_core::BackendProfile::new(
            "the lock key's create revision",
            "a watch on the predecessor's key: one release wakes one waiter (a semaphore's release \
             wakes its waiters to read once)",
            "a leader change is a short in-doubt blip (the lease is extended by the new leader); a \
             lease etcd revokes or lets expire loses every lock of its client",
        )
        .with_guarded_writes(
            "EtcdFencedStore: a txn guarded by the key's mod revision as read (compare-and-swap); \
             put_if_held: a txn guarded by the lock key's create revision (Go's IsOwner())",
        )
        .with_elections(
            "etcd's concurrency.Election (`etcdctl elect`): keys `<prefix>/<lease hex>` under \
             `[ns/]%election/<name>` holding the value, the lowest create revision leads; a watch on \
             the prefix wakes followers",
        )
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::Session
    }

    /// A hold is believed for at most the lease TTL after its last confirmed keep-alive (the core
    /// takes the clock-drift margin off that): etcd expires the lease one TTL, by its clock,
    /// after it last received a keep-alive — at the earliest when that one reached it — and then
    /// deletes the keys, handing the lock to the next waiter.
    fn lease_margin(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(self.session_ttl())
    }

    /// Raised while the keep-alive stream of the hold's lease is broken or a reply is overdue
    /// (etcd may be electing a leader, or this client is cut off): the hold is in doubt until a
    /// keep-alive is confirmed, or lost when the TTL passes. A lease found lost keeps it raised:
    /// its holds stay in doubt until their own checks report them lost, whatever lease the
    /// client has since (not the session's current lease: that is a new one after a loss).
    fn doubt_signal(&self, lease: &EtcdLease) -> Option<lock_core::DoubtSignal> {
        Some(lease.lease.doubt.clone())
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<EtcdLease>> {
        let _ = owner;
        check_lease(ttl)?;
        refuse_async_context()?;
        Ok(self.acquire(name, Wait::No, ttl)?.map(|won| won.lease))
    }

    fn extend(&self, lease: &mut EtcdLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        refuse_async_context()?;
        self.check_leases(&[&lease.lease]).pop().unwrap_or(Ok(false))
    }

    fn extend_many(&self, batch: &mut [Extension<'_, EtcdLease>]) -> Vec<Result<bool>> {
        if let Err(error) = batch.iter().try_for_each(|item| check_lease(item.ttl)) {
            return batch.iter().map(|_| Err(Error::invalid_config(error.to_string()))).collect();
        }
        if in_async_context() {
            return batch.iter().map(|_| Err(async_context_error())).collect();
        }
        let leases: Vec<&Arc<ClientLease>> = batch.iter().map(|item| &item.lease.lease).collect();
        self.check_leases(&leases)
    }

    fn release(&self, mut lease: EtcdLease) -> Result<bool> {
        let Some(Held { slot, shared, .. }) = lease.held.take() else { return Ok(false) };
        if !self.leave_key(&lease, shared) {
            // A downgrade: another lease of this client still holds the key, which stays.
            return self.key_still_there(&lease);
        }
        // The lease is gone, and the key with it.
        if lease.lease.is_lost() {
            return Ok(false);
        }
        let key = std::mem::take(&mut lease.key);
        if let Err(error) = refuse_async_context() {
            // Not waited for here, but sent: the key goes as soon as etcd can delete it.
            self.abandon(key, lease.create_revision, Arc::clone(&lease.lease), slot);
            return Err(error);
        }
        let session = &self.inner.session;
        match session.txn(self.io_deadline(), delete_if_revision(&key, lease.create_revision)) {
            Ok(response) => Ok(response.succeeded()),
            Err(failure) if failure.is_lease_gone() => Ok(false),
            Err(failure) => {
                // Refused or unanswered: the key may still be there, holding the lock for as
                // long as the client lives. Delete it in the background until etcd confirms
                // (or the lease ends, which deletes it too).
                self.abandon(key, lease.create_revision, Arc::clone(&lease.lease), slot);
                Err(failure.into_error("release"))
            }
        }
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = EtcdLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = EtcdLease>> {
        Some(self)
    }

    fn elections(&self) -> Option<&dyn lock_core::Elections<Lease = EtcdLease>> {
        Some(self)
    }

    fn read_write(&self) -> Option<&dyn lock_core::ReadWrite<Lease = EtcdLease>> {
        Some(self)
    }

    fn permits(&self) -> Option<&dyn lock_core::Permits<Lease = EtcdLease>> {
        Some(self)
    }

    fn missing_abilities(&self) -> Option<&'static str> {
        None
    }
}

impl NativeWait for EtcdBackend {
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<EtcdLease>>> {
        let _ = owner;
        check_lease(ttl)?;
        refuse_async_context()?;
        let Some(Won { lease, confirmed_at, waited }) = self.acquire(name, Wait::Until(deadline), ttl)?
        else {
            return Ok(None);
        };
        let start = Self::hold_start(&lease.lease, ttl, confirmed_at);
        Ok(Some(Acquired::new(lease, start).contended_if(waited)))
    }
}

impl Fencing for EtcdBackend {
    fn fencing_token(&self, lease: &EtcdLease) -> FencingToken {
        lease.fencing_token()
    }
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.inner.session.settings().endpoints)
            .field("namespace", &self.namespace())
            .finish_non_exhaustive()
    }
}
