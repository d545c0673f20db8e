//! The [`Elections`] ability: what a backend does for leader election, and what followers read.

use std::time::{Duration, Instant};

use crate::abilities::Request;
use crate::backend::{Acquired, DistributedLock, FencingToken};
use crate::error::Result;
use crate::name::LockName;

/// The leader of an election as followers see it: the value it last proclaimed and the fencing
/// token of its leadership.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader published ([`Leadership::proclaim`](crate::Leadership::proclaim), or the
    /// campaign's value): an address, a host name — whatever followers need to reach it.
    pub value: Vec<u8>,
    /// The fencing token of the leadership, where the backend issues tokens: it increases with
    /// every new leader, so two readings with the same token are the same term.
    pub token: Option<FencingToken>,
}

impl Leader {
    /// A leader that proclaimed `value` under `token`.
    pub fn new(value: impl Into<Vec<u8>>, token: Option<FencingToken>) -> Self {
        Self { value: value.into(), token }
    }

    /// The value as text, with invalid UTF-8 replaced (for logs and the CLI).
    pub fn value_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.value)
    }
}

/// A follower's wake-up for changes of one election: armed when made, so no change after that is
/// missed.
pub trait LeaderWatch: Send {
    /// Blocks until the election may have changed since the watch was made or last returned
    /// (a new leader, a proclaimed value, a leader gone), or until `until`; returns whether a
    /// notice from the server woke it. Spurious returns are allowed: the caller reads
    /// [`Elections::leader`] again after each.
    ///
    /// # Errors
    /// The server's errors; the caller then re-reads and makes a new watch.
    fn wait(&mut self, until: Instant) -> Result<bool>;
}

/// Optional ability: leader election (Curator's `LeaderLatch`, etcd's `concurrency.Election`).
///
/// A leadership is a lease like any other — extended, released, lost and doubted through
/// [`DistributedLock`]'s methods — of a lock of its own: an election never contends with the
/// mutex, read-write lock or semaphore of the same name.
///
/// # Contract
/// - **One leader.** As the mutex: while a lease returned by [`campaign`](Self::campaign) is
///   valid, no other campaign for the name returns one.
/// - **Followers see the leader.** [`leader`](Self::leader) returns the current leader's last
///   proclaimed value and token, and `None` when no lease of the name is held — a leader gone
///   without resigning stops being returned once the server has dropped its hold. Between a new
///   leader's win and its first value being readable there may be one round trip where the
///   backend says so in its docs.
/// - **Conditional proclaim.** [`proclaim`](Self::proclaim) writes only while the lease still
///   holds, checked in the same atomic step as the write, and never overwrites a later leader's
///   value (a deposed leader gets [`Error::NotHeld`](crate::Error::NotHeld)).
/// - **Bounded.** Every call returns by its deadline plus one connect and one I/O timeout.
///
/// # Errors
/// As [`DistributedLock::try_acquire`].
pub trait Elections: DistributedLock {
    /// Campaigns for `request.name`, publishing `value` as the leader's value from the moment
    /// the campaign wins (in the same step where the backend can), waiting until the request's
    /// deadline; `Ok(None)` if another candidate stayed leader.
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<Self::Lease>>>;

    /// Publishes `value` as the leader's value, if `lease` still leads.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the server no longer has the leadership
    /// under this lease (nothing was written); the server's errors.
    fn proclaim(&self, lease: &mut Self::Lease, value: &[u8]) -> Result<()>;

    /// The current leader of the election `name`; `None` when nobody leads.
    ///
    /// # Errors
    /// The server's errors.
    fn leader(&self, name: &LockName) -> Result<Option<Leader>>;

    /// A watch on the election `name`, armed before it returns. Backends without server
    /// notices return one that sleeps until its deadline (the caller's documented re-check).
    ///
    /// # Errors
    /// The server's errors.
    fn watch_leader(&self, name: &LockName) -> Result<Box<dyn LeaderWatch + '_>>;
}

/// A [`LeaderWatch`] for backends without server notices: each wait sleeps until its deadline.
#[derive(Debug, Default)]
pub struct SleepingWatch;

impl LeaderWatch for SleepingWatch {
    fn wait(&mut self, until: Instant) -> Result<bool> {
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        Ok(false)
    }
}

/// How often a follower re-reads the leader when no notice comes: a lease that runs out without
/// a release sends none (a crashed leader), so this bounds how late followers see it. A quarter
/// of the lease, between 100 ms and 1 s.
pub fn leader_recheck(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
}
