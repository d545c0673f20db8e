//! [`Lock`]: one named distributed lock, with Java-style blocking, timed and non-blocking
//! acquisition.

use std::fmt;
use std::time::{Duration, Instant};

use crate::abilities::{Deadline, Primitive};
use crate::acquire;
use crate::backend::{Acquired, DistributedLock};
use crate::backoff::Backoff;
use crate::client::LockClient;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::name::LockName;
use crate::owner::OwnerToken;
use crate::reentrancy::HoldSlot;

/// One named lock of a [`LockClient`]. Cheap to clone; clones are the same lock.
///
/// Acquiring returns a [`LockGuard`] that releases on drop. With the default options the lock is
/// reentrant per thread and its lease is renewed in the background until released.
pub struct Lock<B: DistributedLock> {
    client: LockClient<B>,
    name: LockName,
}

impl<B: DistributedLock> Lock<B> {
    /// The lock called `name` of `client`.
    pub fn new(client: &LockClient<B>, name: LockName) -> Self {
        Self { client: client.clone(), name }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &LockClient<B> {
        &self.client
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// # Errors
    /// The backend's errors ([`Error::Connection`](crate::Error::Connection),
    /// [`Error::Timeout`](crate::Error::Timeout), …) end the wait at once: an unreachable server
    /// is reported, never waited out. [`Error::NotHeld`](crate::Error::NotHeld) when this thread
    /// holds the lock but has lost it; [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) when
    /// this thread already holds a non-reentrant lock; [`Error::Closed`](crate::Error::Closed)
    /// after [`LockClient::close`].
    pub fn lock(&self) -> Result<LockGuard<B>> {
        acquire::until_acquired(&self.client.shared, || self.acquire(Deadline::Never))
    }

    /// Acquires the lock if it is free right now; `Ok(None)` if someone else holds it.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), except that a non-reentrant lock held by this thread is simply
    /// `Ok(None)`.
    pub fn try_lock(&self) -> Result<Option<LockGuard<B>>> {
        self.acquire(Deadline::Now)
    }

    /// Acquires the lock, waiting at most `timeout`; `Ok(None)` if it stayed held.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard<B>>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.try_lock_until(deadline),
            // A timeout too long to represent is no timeout at all.
            None => self.lock().map(Some),
        }
    }

    /// Acquires the lock, waiting until `deadline` at the latest; `Ok(None)` if it stayed held.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard<B>>> {
        self.acquire(Deadline::until(deadline))
    }

    /// Whether the current thread holds this lock (through this client) and has not lost it.
    pub fn is_held_by_current_thread(&self) -> bool {
        self.client.shared.holds.current(&self.name, HoldSlot::Mutex).is_some_and(|(_, held)| held.is_held())
    }

    /// How many times the current thread has locked this lock without unlocking it.
    pub fn hold_count(&self) -> usize {
        self.client.shared.holds.current(&self.name, HoldSlot::Mutex).map_or(0, |(count, _)| count)
    }

    /// Releases this client's hold on the lock, whichever thread holds it and however many
    /// times: the way out for a guard leaked with `mem::forget` (parking_lot's `force_unlock`).
    /// Returns whether there was a hold to release. It never touches another owner's lock (unlike
    /// Redisson's `forceUnlock`): the backend releases only under this client's owner token.
    ///
    /// Guards of the released hold then report [`HoldState::Released`](crate::HoldState) and
    /// their unlock does nothing.
    ///
    /// # Errors
    /// The backend's error when it could not be asked (the lease then runs out on its own, a
    /// session-bound hold ends with its session); [`Error::NotHeld`](crate::Error::NotHeld) when
    /// the server says the lock was no longer held under this client's token.
    pub fn force_unlock(&self) -> Result<bool> {
        let shared = &self.client.shared;
        let holds = shared.holds.remove_all(&self.name, HoldSlot::Mutex);
        let mut outcome = Ok(!holds.is_empty());
        for held in holds {
            let released = held.release(&shared.backend);
            shared.leases.note_released();
            if let Err(error) = released {
                outcome = Err(error);
            }
        }
        outcome
    }

    fn acquire(&self, deadline: Deadline) -> Result<Option<LockGuard<B>>> {
        let shared = &self.client.shared;
        if let Some(answer) = acquire::reentered(shared, &self.name, HoldSlot::Mutex, deadline)? {
            return Ok(answer);
        }
        let owner = OwnerToken::random();
        let attempt = shared.observer.attempt(&self.name, Primitive::Mutex);
        let acquired = match deadline {
            Deadline::Now => self.try_acquire_once(&owner),
            Deadline::At(deadline) => self.acquire_waiting(&owner, Some(deadline)),
            Deadline::Never => self.acquire_waiting(&owner, None),
        };
        acquire::record(shared, (&self.name, HoldSlot::Mutex, owner), attempt, acquired)
    }

    fn try_acquire_once(&self, owner: &OwnerToken) -> Result<Option<Acquired<B::Lease>>> {
        let sent_at = Instant::now();
        let lease =
            self.client.shared.backend.try_acquire(&self.name, owner, self.client.shared.options.lease)?;
        Ok(lease.map(|lease| Acquired::new(lease, sent_at)))
    }

    /// Waits with the backend's server wake-ups if it has them, else with capped exponential
    /// backoff between single attempts.
    fn acquire_waiting(
        &self,
        owner: &OwnerToken,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<B::Lease>>> {
        let shared = &self.client.shared;
        if let Some(native) = shared.backend.native_wait() {
            return native.acquire_until(&self.name, owner, shared.options.lease, deadline);
        }
        let (min, max) = shared.options.backoff();
        let mut backoff = Backoff::new(min, max);
        let mut waited = false;
        loop {
            if let Some(acquired) = self.try_acquire_once(owner)? {
                return Ok(Some(acquired.contended_if(waited)));
            }
            if !backoff.sleep_until(deadline) {
                return Ok(None);
            }
            waited = true;
        }
    }
}

impl<B: DistributedLock> Clone for Lock<B> {
    fn clone(&self) -> Self {
        Self { client: self.client.clone(), name: self.name.clone() }
    }
}

impl<B: DistributedLock> fmt::Debug for Lock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("backend", &self.client.shared.backend.backend_name())
            .finish()
    }
}
