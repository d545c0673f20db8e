//! [`Election`]: one leader among many candidates, and what followers see of it (Curator's
//! `LeaderLatch`, etcd's `concurrency.Election`, client-go's `leaderelection`).

mod ability;
mod leadership;

use std::fmt;
use std::time::{Duration, Instant};

use crate::abilities::{Deadline, Primitive, Request};
use crate::acquire;
use crate::backend::DistributedLock;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::name::LockName;
use crate::owner::OwnerToken;
use crate::reentrancy::HoldSlot;
use crate::rw_lock::deadline_after;

pub use ability::{leader_recheck, Elections, Leader, LeaderWatch, SleepingWatch};
pub use leadership::Leadership;

/// A named election of a [`LockClient`]: candidates [`campaign`](Self::campaign), one at a time
/// leads, followers read [`leader`](Self::leader) and [`observe`](Self::observe) it. Cheap to
/// clone. Its name is its own: it never contends with the lock, read-write lock or semaphore of
/// the same name.
///
/// Each campaign is one candidate; a thread campaigns for one leadership of an election at a
/// time (a second campaign on a thread that leads is refused as a would-be deadlock), and the
/// threads of one client are rivals.
///
/// ```
/// use lock_core::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let election = client.election("compactor")?.with_value("host-1:7000");
/// let leadership = election.campaign()?;
/// assert!(leadership.is_leader());
/// assert_eq!(election.leader()?.unwrap().value, b"host-1:7000");
/// leadership.proclaim("host-1:7001")?; // followers see it; a deposed leader could not
/// leadership.resign()?;
/// assert_eq!(election.leader()?, None);
/// # Ok::<(), lock_core::Error>(())
/// ```
pub struct Election<B: DistributedLock> {
    client: LockClient<B>,
    name: LockName,
    value: Vec<u8>,
}

impl<B: DistributedLock> Election<B> {
    /// The election called `name` of `client`; campaigns publish an empty value until
    /// [`with_value`](Self::with_value).
    pub fn new(client: &LockClient<B>, name: LockName) -> Self {
        Self { client: client.clone(), name, value: Vec::new() }
    }

    /// The same election, whose campaigns publish `value` from the moment they win.
    pub fn with_value(mut self, value: impl Into<Vec<u8>>) -> Self {
        self.value = value.into();
        self
    }

    /// The election's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Campaigns until this candidate leads.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no elections; [`Error::WouldDeadlock`] when
    /// this thread already leads the election through this client; otherwise as
    /// [`Lock::lock`](crate::Lock::lock).
    pub fn campaign(&self) -> Result<Leadership<B>> {
        acquire::until_acquired(&self.client.shared, || self.guard_by(Deadline::Never)).map(Leadership::new)
    }

    /// Leads if nobody does right now; `Ok(None)` otherwise.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign), except that a thread that already leads gets `Ok(None)`.
    pub fn try_campaign(&self) -> Result<Option<Leadership<B>>> {
        self.campaign_by(Deadline::Now)
    }

    /// Campaigns for at most `timeout`.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign).
    pub fn campaign_for(&self, timeout: Duration) -> Result<Option<Leadership<B>>> {
        self.campaign_by(deadline_after(timeout))
    }

    /// Campaigns until `deadline` at the latest.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign).
    pub fn campaign_until(&self, deadline: Instant) -> Result<Option<Leadership<B>>> {
        self.campaign_by(Deadline::until(deadline))
    }

    /// The current leader, as the server has it: its last proclaimed value and its token;
    /// `None` when nobody leads.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no elections; the server's errors.
    pub fn leader(&self) -> Result<Option<Leader>> {
        self.elections()?.leader(&self.name)
    }

    /// An observer of the leader: [`LeaderObserver::changed`] returns each new leader (or its
    /// absence) as the server reports it — pub/sub, watches, notifications — with a re-check
    /// every [`leader_recheck`] of the lease for changes no notice announces.
    ///
    /// # Errors
    /// As [`leader`](Self::leader).
    pub fn observe(&self) -> Result<LeaderObserver<'_, B>> {
        let elections = self.elections()?;
        let watch = elections.watch_leader(&self.name)?;
        let seen = elections.leader(&self.name)?;
        Ok(LeaderObserver { election: self, watch, seen })
    }

    fn elections(&self) -> Result<&dyn Elections<Lease = B::Lease>> {
        let backend = &self.client.shared.backend;
        backend
            .elections()
            .ok_or(Error::Unsupported { backend: backend.backend_name(), feature: "leader election" })
    }

    fn campaign_by(&self, deadline: Deadline) -> Result<Option<Leadership<B>>> {
        Ok(self.guard_by(deadline)?.map(Leadership::new))
    }

    fn guard_by(&self, deadline: Deadline) -> Result<Option<crate::LockGuard<B>>> {
        let shared = &self.client.shared;
        let elections = self.elections()?;
        if let Some(answer) = acquire::reentered(shared, &self.name, HoldSlot::Leader, deadline)? {
            return Ok(answer);
        }
        let owner = OwnerToken::random();
        let options = &shared.options;
        let request = Request::new(&self.name, &owner, options.lease, deadline, options.backoff());
        let attempt = shared.observer.attempt(&self.name, Primitive::Leader);
        let acquired = elections.campaign(&request, &self.value);
        acquire::record(shared, (&self.name, HoldSlot::Leader, owner), attempt, acquired)
    }
}

/// Follows one election's leader; made by [`Election::observe`].
pub struct LeaderObserver<'a, B: DistributedLock> {
    election: &'a Election<B>,
    watch: Box<dyn LeaderWatch + 'a>,
    seen: Option<Leader>,
}

impl<B: DistributedLock> LeaderObserver<'_, B> {
    /// The leader as last read.
    pub fn current(&self) -> Option<&Leader> {
        self.seen.as_ref()
    }

    /// Waits at most `timeout` for the leader to change from [`current`](Self::current); returns
    /// `Some(new)` (`Some(None)`: nobody leads now) on a change, `None` on timeout.
    ///
    /// # Errors
    /// The server's errors; the observer stays usable (its watch is made again).
    pub fn changed(&mut self, timeout: Duration) -> Result<Option<Option<Leader>>> {
        let deadline = Instant::now().checked_add(timeout);
        let elections = self.election.elections()?;
        let recheck = leader_recheck(self.election.client.shared.options.lease);
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let until =
                [deadline, now.checked_add(recheck)].into_iter().flatten().min().unwrap_or(now + recheck);
            if let Err(error) = self.watch.wait(until) {
                self.watch = elections.watch_leader(&self.election.name)?;
                tracing::debug!(%error, "a leader watch failed; watching again");
            }
            let leader = elections.leader(&self.election.name)?;
            if leader != self.seen {
                self.seen.clone_from(&leader);
                return Ok(Some(leader));
            }
        }
    }
}

impl<B: DistributedLock> Clone for Election<B> {
    fn clone(&self) -> Self {
        Self { client: self.client.clone(), name: self.name.clone(), value: self.value.clone() }
    }
}

impl<B: DistributedLock> fmt::Debug for Election<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("backend", &self.client.shared.backend.backend_name())
            .finish_non_exhaustive()
    }
}

impl<B: DistributedLock> fmt::Debug for LeaderObserver<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("election", &self.election.name)
            .field("seen", &self.seen)
            .finish()
    }
}
