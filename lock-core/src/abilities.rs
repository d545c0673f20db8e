//! Optional backend abilities beyond the mutex: read-write locks ([`ReadWrite`]) and counting
//! semaphores ([`Permits`]). Their leases are the backend's own [`Lease`](DistributedLock::Lease),
//! so renewal, loss reporting, fencing and guards work for them exactly as for the mutex.

use std::fmt;
use std::time::{Duration, Instant};

use crate::backend::{Acquired, DistributedLock};
use crate::backoff::Backoff;
use crate::error::Result;
use crate::name::LockName;
use crate::owner::OwnerToken;

/// Which of a name's locks a hold is. A name has one of each, and they never contend with each
/// other: the mutex, a read-write lock's two sides, a semaphore's permits. Backends name their
/// keys and scripts by it; metrics and spans label holds with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// The exclusive lock ([`DistributedLock`]).
    Mutex,
    /// A read lock ([`Access::Read`]).
    Read,
    /// A write lock ([`Access::Write`]).
    Write,
    /// One permit of a counting semaphore ([`Permits`]).
    Permit,
    /// The leadership of an election ([`Elections`](crate::Elections)).
    Leader,
}

impl From<Access> for Primitive {
    fn from(access: Access) -> Self {
        match access {
            Access::Read => Primitive::Read,
            Access::Write => Primitive::Write,
        }
    }
}

impl Primitive {
    /// `"mutex"`, `"read"`, `"write"`, `"permit"` or `"leader"`: the `mode` label of the metrics and spans.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::Read => "read",
            Self::Write => "write",
            Self::Permit => "permit",
            Self::Leader => "leader",
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The side of a read-write lock an acquisition asks for: the read-write part of
/// [`Primitive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Shared with the other readers of the name; excludes writers.
    Read,
    /// Excludes every other reader and writer of the name.
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
        })
    }
}

/// How long an acquisition may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// One attempt, no waiting.
    Now,
    /// Waiting until this instant at the latest.
    At(Instant),
    /// Waiting as long as it takes.
    Never,
}

/// How far ahead a deadline may be and still count as one (see [`Deadline::until`]).
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Deadline {
    /// Waiting until `at`: [`At`](Self::At), or [`Never`](Self::Never) for an instant more than
    /// a century ahead — no deadline in practice, and one at the edge of what an [`Instant`]
    /// holds would overflow a backend that adds its own timeouts to it.
    pub fn until(at: Instant) -> Self {
        if at.saturating_duration_since(Instant::now()) > FAR {
            Self::Never
        } else {
            Self::At(at)
        }
    }

    /// The instant, if there is one (`Now` is the present).
    pub fn instant(self) -> Option<Instant> {
        match self {
            Self::Now => Some(Instant::now()),
            Self::At(at) => Some(at),
            Self::Never => None,
        }
    }
}

/// One acquisition asked of a [`ReadWrite`] or [`Permits`] backend.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Request<'a> {
    /// The name (a read-write lock's or a semaphore's names are their own: they never contend
    /// with the mutex of the same name).
    pub name: &'a LockName,
    /// The owner the lease is bound to.
    pub owner: &'a OwnerToken,
    /// The lease asked for.
    pub ttl: Duration,
    /// How long the caller may wait.
    pub deadline: Deadline,
    /// The client's backoff bounds, for backends that wait by polling ([`poll_until`]).
    pub backoff: (Duration, Duration),
}

impl<'a> Request<'a> {
    /// A request for `name` by `owner` with a lease of `ttl`, waiting until `deadline`, polling
    /// (if the backend polls) with `backoff`'s bounds.
    pub fn new(
        name: &'a LockName,
        owner: &'a OwnerToken,
        ttl: Duration,
        deadline: Deadline,
        backoff: (Duration, Duration),
    ) -> Self {
        Self { name, owner, ttl, deadline, backoff }
    }

    /// How long a waiting writer's place in line lasts between two of its attempts: a polling
    /// writer marks itself as waiting for this long with each attempt, and readers of other
    /// owners are refused while the mark lasts. `None` for a single attempt (no mark: a
    /// `try_write` that fails must not hold readers back).
    pub fn queue_mark(&self) -> Option<Duration> {
        match self.deadline {
            Deadline::Now => None,
            // Twice the longest pause between attempts, plus room for one slow round trip.
            Deadline::At(_) | Deadline::Never => Some(self.backoff.1 * 2 + Duration::from_millis(500)),
        }
    }
}

/// Optional ability: read-write locks (Redisson's `RReadWriteLock`, Curator's
/// `InterProcessReadWriteLock`, Java's `ReentrantReadWriteLock` across processes).
///
/// # Contract
/// - **Modes.** Read leases of one name coexist; a write lease excludes every other lease of
///   the name — except a read lease asked by the *same owner* as the write lease (the way a
///   writer takes the read lock before releasing the write lock: a downgrade).
/// - **Writers are not starved.** Once a writer waits (`deadline` other than
///   [`Deadline::Now`]), new readers of other owners wait behind it. Where the server decides
///   the order (database lock queues), the backend documents the server's policy.
/// - **Leases** behave as the mutex's: [`extend`](DistributedLock::extend) and
///   [`release`](DistributedLock::release) act on a read-write lease only while it holds, and
///   [`fencing`](DistributedLock::fencing) tokens, where issued, come from one counter per name
///   for both modes (a write token is greater than every token issued before it).
/// - **Bounded.** A call returns by its deadline plus one connect and one I/O timeout.
///
/// # Errors
/// As [`DistributedLock::try_acquire`].
pub trait ReadWrite: DistributedLock {
    /// Acquires `request.name` in `access` mode for `request.owner`, waiting until the
    /// request's deadline; `Ok(None)` if it stayed taken.
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<Self::Lease>>>;

    /// Whether a writer's read lock, once its write lock is released (a downgrade), is shared
    /// with other readers. `false` where the server cannot give up an exclusive lock while the
    /// read lives on (InnoDB keeps a transaction's row locks until it ends): the read then stays
    /// exclusive until released — never two holders, but other readers wait longer.
    ///
    /// Defaults to `true`.
    fn shares_downgraded_reads(&self) -> bool {
        true
    }
}

/// Optional ability: counting semaphores whose permits are leases (Redisson's
/// `RPermitExpirableSemaphore`, Curator's `InterProcessSemaphoreV2`).
///
/// # Contract
/// - **At most `permits` leases** of one name are valid at once, across every client.
/// - **One count per name.** The count is kept on the server while permits are held; a request
///   with another count is refused with [`Error::PermitsMismatch`](crate::Error::PermitsMismatch)
///   (never silent over-admission). Once no permit is held, a new count may be set.
/// - **Leases** behave as the mutex's: a crashed holder's permit returns when its lease ends
///   (or its session does, for session-bound backends).
/// - **Bounded.** A call returns by its deadline plus one connect and one I/O timeout.
///
/// # Errors
/// As [`DistributedLock::try_acquire`], plus
/// [`Error::PermitsMismatch`](crate::Error::PermitsMismatch).
pub trait Permits: DistributedLock {
    /// Acquires one of `permits` permits of `request.name` for `request.owner`, waiting until
    /// the request's deadline; `Ok(None)` if none came free.
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<Self::Lease>>>;
}

/// Waits by polling: calls `attempt` until it returns a lease or the request's deadline passes,
/// sleeping with capped exponential backoff (the request's bounds) in between. `attempt` gets
/// the request's [`queue_mark`](Request::queue_mark).
///
/// For backends without server wake-ups for a primitive.
///
/// # Errors
/// The first error `attempt` returns.
pub fn poll_until<L>(
    request: &Request<'_>,
    mut attempt: impl FnMut(Option<Duration>) -> Result<Option<L>>,
) -> Result<Option<Acquired<L>>> {
    let mark = request.queue_mark();
    let deadline = match request.deadline {
        Deadline::Now => {
            let sent_at = Instant::now();
            return Ok(attempt(None)?.map(|lease| Acquired::new(lease, sent_at)));
        }
        Deadline::At(at) => Some(at),
        Deadline::Never => None,
    };
    let (min, max) = request.backoff;
    let mut backoff = Backoff::new(min, max);
    let mut waited = false;
    loop {
        let sent_at = Instant::now();
        if let Some(lease) = attempt(mark)? {
            return Ok(Some(Acquired::new(lease, sent_at).contended_if(waited)));
        }
        if !backoff.sleep_until(deadline) {
            return Ok(None);
        }
        waited = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The latest instant `Instant::now()` can reach by adding a duration.
    fn edge_of_time() -> Instant {
        let (mut at, mut step) = (Instant::now(), Duration::MAX);
        while !step.is_zero() {
            match at.checked_add(step) {
                Some(later) => at = later,
                None => step /= 2,
            }
        }
        at
    }

    #[test]
    fn a_deadline_past_a_century_is_none_at_all() {
        let soon = Instant::now() + Duration::from_secs(3600);
        assert_eq!(Deadline::until(soon), Deadline::At(soon));
        assert_eq!(Deadline::until(Instant::now() + 2 * FAR), Deadline::Never);
        // Nothing a backend adds to a deadline can overflow then.
        assert_eq!(Deadline::until(edge_of_time()), Deadline::Never);
    }
}
