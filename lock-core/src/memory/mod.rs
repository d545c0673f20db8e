//! [`MemoryBackend`]: the in-process reference backend, for the mutex, read-write locks,
//! semaphores and elections.

mod election;
mod read_write;
mod semaphore;
mod table;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::abilities::{Access, Permits, ReadWrite, Request};
use crate::backend::{Acquired, DistributedLock, Fencing, FencingToken, NativeWait};
use crate::error::Result;
use crate::name::LockName;
use crate::options::check_lease;
use crate::owner::OwnerToken;
use table::Locks;

/// Locks kept in this process's memory, with the same semantics as the server backends: leases
/// that expire, owner-bound extend and release, fencing tokens and native wake-ups — for the
/// mutex, [`ReadWrite`] locks (writer-preferring) and [`Permits`].
///
/// It is the reference the conformance suite holds every server backend to, and the default for
/// examples. Clones share one lock space ("one server"); it coordinates threads, not processes.
#[derive(Clone, Default)]
pub struct MemoryBackend {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    locks: Mutex<Locks>,
    /// The backend's fenced store ([`MemoryBackend::fenced_store`]).
    fenced: crate::MemoryFencedStore,
    /// Notified on every release, so waiters retry at once.
    released: Condvar,
}

/// A lease of the [`MemoryBackend`].
#[derive(Debug)]
pub struct MemoryLease {
    pub(crate) name: LockName,
    owner: OwnerToken,
    fence: FencingToken,
    kind: LeaseKind,
}

/// Which primitive a [`MemoryLease`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseKind {
    Mutex,
    Rw(Access),
    Permit,
    Leader,
}

impl MemoryBackend {
    /// An empty lock space.
    pub fn new() -> Self {
        Self::default()
    }

    /// The fenced store of this backend's lock space: every clone of the backend gets the same
    /// keys, as the clients of one server would.
    pub fn fenced_store(&self) -> crate::MemoryFencedStore {
        self.state.fenced.clone()
    }

    /// Deletes `name`'s lock whoever holds it, as an operator deleting a key would; returns
    /// whether it was held. For tests of a lock lost underneath its holder.
    pub fn force_release(&self, name: &LockName) -> bool {
        let removed = self.state.locks.lock().mutexes.remove(name).is_some();
        self.state.released.notify_all();
        removed
    }

    /// How long `name`'s current lease has left, as the "server" sees it; `None` if not held.
    pub fn remaining_lease(&self, name: &LockName) -> Option<Duration> {
        let now = Instant::now();
        self.state.locks.lock().mutex_holder(name, now).map(|entry| entry.expires_at - now)
    }

    /// Tries `attempt` under the table's lock until it grants or `deadline` passes, sleeping on
    /// the release condition variable (and waking at `next_wake`'s instant) in between.
    fn wait_for<L>(
        &self,
        deadline: Option<Instant>,
        mut attempt: impl FnMut(&mut Locks, Instant) -> Result<Option<L>>,
        next_wake: impl Fn(&mut Locks, Instant) -> Option<Instant>,
    ) -> Result<Option<Acquired<L>>> {
        let mut locks = self.state.locks.lock();
        let mut waited = false;
        loop {
            let now = Instant::now();
            if let Some(lease) = attempt(&mut locks, now)? {
                return Ok(Some(Acquired::new(lease, now).contended_if(waited)));
            }
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            // Wake on a release, at a holder's expiry, or at the deadline, whichever is first.
            let wake = [next_wake(&mut locks, now), deadline].into_iter().flatten().min();
            self.sleep(&mut locks, wake);
            waited = true;
        }
    }

    fn sleep(&self, locks: &mut MutexGuard<'_, Locks>, until: Option<Instant>) {
        match until {
            Some(at) => {
                self.state.released.wait_until(locks, at);
            }
            None => self.state.released.wait(locks),
        }
    }
}

impl DistributedLock for MemoryBackend {
    type Lease = MemoryLease;

    fn backend_name(&self) -> &'static str {
        "memory"
    }

    fn profile(&self) -> crate::BackendProfile {
        crate::BackendProfile::new(
            "a per-name counter in the process's lock table",
            "a condition variable in the process",
            "none: the locks live and die with the process",
        )
        .with_guarded_writes("MemoryFencedStore, in the process: the check and the write under one mutex")
        .with_elections(
            "a leader entry per name in the lock table; followers woken by its condition variable",
        )
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<MemoryLease>> {
        check_lease(ttl)?;
        Ok(self.state.locks.lock().acquire_mutex(name, owner, ttl, Instant::now()))
    }

    fn extend(&self, lease: &mut MemoryLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        let now = Instant::now();
        Ok(match self.state.locks.lock().expiry_of(lease, now) {
            Some(expires_at) => {
                *expires_at = now + ttl;
                true
            }
            None => false,
        })
    }

    fn release(&self, lease: MemoryLease) -> Result<bool> {
        let owned = self.state.locks.lock().remove(&lease, Instant::now());
        if owned {
            self.state.released.notify_all();
        }
        Ok(owned)
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = MemoryLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = MemoryLease>> {
        Some(self)
    }

    fn read_write(&self) -> Option<&dyn ReadWrite<Lease = MemoryLease>> {
        Some(self)
    }

    fn permits(&self) -> Option<&dyn Permits<Lease = MemoryLease>> {
        Some(self)
    }

    fn elections(&self) -> Option<&dyn crate::Elections<Lease = MemoryLease>> {
        Some(self)
    }
}

impl NativeWait for MemoryBackend {
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<MemoryLease>>> {
        check_lease(ttl)?;
        self.wait_for(
            deadline,
            |locks, now| Ok(locks.acquire_mutex(name, owner, ttl, now)),
            |locks, now| locks.mutex_holder(name, now).map(|entry| entry.expires_at),
        )
    }
}

impl Fencing for MemoryBackend {
    fn fencing_token(&self, lease: &MemoryLease) -> FencingToken {
        lease.fence
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend").field("held", &self.state.locks.lock().mutexes.len()).finish()
    }
}

/// Checks a request's lease, for the read-write and semaphore paths.
fn check(request: &Request<'_>) -> Result<()> {
    check_lease(request.ttl)
}
