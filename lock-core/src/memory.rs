//! [`MemoryBackend`]: the in-process reference backend.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::{Acquired, DistributedLock, Fencing, FencingToken, NativeWait};
use crate::error::Result;
use crate::name::LockName;
use crate::options::check_lease;
use crate::owner::OwnerToken;

/// Locks kept in this process's memory, with the same semantics as the server backends: leases
/// that expire, owner-bound extend and release, fencing tokens and native wake-ups.
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
    /// Notified on every release, so waiters retry at once.
    released: Condvar,
}

#[derive(Default)]
struct Locks {
    held: HashMap<LockName, Entry>,
    /// The last fencing token issued per name; kept after release so tokens never repeat.
    fences: HashMap<LockName, u64>,
}

struct Entry {
    owner: OwnerToken,
    expires_at: Instant,
}

/// A lease of the [`MemoryBackend`].
#[derive(Debug)]
pub struct MemoryLease {
    name: LockName,
    owner: OwnerToken,
    fence: FencingToken,
}

impl Locks {
    /// The current holder of `name`, after dropping an expired one.
    fn holder(&mut self, name: &LockName, now: Instant) -> Option<&mut Entry> {
        if self.held.get(name).is_some_and(|entry| entry.expires_at <= now) {
            self.held.remove(name);
        }
        self.held.get_mut(name)
    }

    fn acquire(
        &mut self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        now: Instant,
    ) -> Option<MemoryLease> {
        if self.holder(name, now).is_some() {
            return None;
        }
        let fence = self.fences.entry(name.clone()).or_insert(0);
        *fence += 1;
        let fence = FencingToken::new(*fence);
        self.held.insert(name.clone(), Entry { owner: *owner, expires_at: now + ttl });
        Some(MemoryLease { name: name.clone(), owner: *owner, fence })
    }
}

impl MemoryBackend {
    /// An empty lock space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes `name`'s lock whoever holds it, as an operator deleting a key would; returns
    /// whether it was held. For tests of a lock lost underneath its holder.
    pub fn force_release(&self, name: &LockName) -> bool {
        let removed = self.state.locks.lock().held.remove(name).is_some();
        self.state.released.notify_all();
        removed
    }

    /// How long `name`'s current lease has left, as the "server" sees it; `None` if not held.
    pub fn remaining_lease(&self, name: &LockName) -> Option<Duration> {
        let now = Instant::now();
        self.state.locks.lock().holder(name, now).map(|entry| entry.expires_at - now)
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
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<MemoryLease>> {
        check_lease(ttl)?;
        Ok(self.state.locks.lock().acquire(name, owner, ttl, Instant::now()))
    }

    fn extend(&self, lease: &mut MemoryLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        let now = Instant::now();
        let mut locks = self.state.locks.lock();
        Ok(match locks.holder(&lease.name, now) {
            Some(entry) if entry.owner == lease.owner => {
                entry.expires_at = now + ttl;
                true
            }
            _ => false,
        })
    }

    fn release(&self, lease: MemoryLease) -> Result<bool> {
        let mut locks = self.state.locks.lock();
        let owned = locks.holder(&lease.name, Instant::now()).is_some_and(|entry| entry.owner == lease.owner);
        if owned {
            locks.held.remove(&lease.name);
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
        let mut locks = self.state.locks.lock();
        loop {
            let now = Instant::now();
            if let Some(lease) = locks.acquire(name, owner, ttl, now) {
                return Ok(Some(Acquired::new(lease, now)));
            }
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            // Wake on a release, at the holder's expiry, or at the deadline, whichever is first.
            let expiry = locks.holder(name, now).map(|entry| entry.expires_at);
            let wake = [expiry, deadline].into_iter().flatten().min();
            match wake {
                Some(at) => {
                    self.state.released.wait_until(&mut locks, at);
                }
                None => self.state.released.wait(&mut locks),
            }
        }
    }
}

impl Fencing for MemoryBackend {
    fn fencing_token(&self, lease: &MemoryLease) -> FencingToken {
        lease.fence
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend").field("held", &self.state.locks.lock().held.len()).finish()
    }
}
