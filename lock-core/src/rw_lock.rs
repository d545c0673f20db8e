//! [`ReadWriteLock`]: one named read-write lock, with Java `ReentrantReadWriteLock` rules across
//! processes.

use std::fmt;
use std::time::{Duration, Instant};

use crate::abilities::{Access, Deadline, Primitive, Request};
use crate::acquire;
use crate::backend::DistributedLock;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::name::LockName;
use crate::owner::OwnerToken;
use crate::reentrancy::HoldSlot;

/// A named read-write lock of a [`LockClient`]: many readers at once, or one writer — Redisson's
/// `RReadWriteLock`, Curator's `InterProcessReadWriteLock`. Cheap to clone; clones are the same
/// lock. Its name is its own: it never contends with the [`Lock`](crate::Lock) of the same name.
///
/// # Contract
/// - **Java `ReentrantReadWriteLock` rules**, per thread and client: a thread may re-enter the
///   mode it holds; a writer may also take the read lock, and keeps it after releasing the write
///   lock (a downgrade); a reader asking for the write lock gets [`Error::WouldDeadlock`] — an
///   upgrade could wait forever for its own read lock — from every form, `try_write` included.
/// - **Writers are not starved**: once a writer waits, new readers of other owners wait behind
///   it (the backend's [`ReadWrite`](crate::ReadWrite) contract; each backend states where the
///   server decides).
/// - Guards, renewal, loss and in-doubt reporting and fencing tokens are the mutex's
///   ([`LockGuard`]); a write token is greater than every token issued before it.
///
/// ```
/// use lock_core::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let cache = client.read_write_lock("cache:products")?;
/// let reader = cache.read()?;
/// assert!(cache.try_write().is_err()); // a reader may not upgrade: WouldDeadlock
/// drop(reader);
/// let writer = cache.write()?;
/// let downgraded = cache.read()?; // a writer may take the read lock ...
/// writer.unlock()?; // ... and keep it after releasing the write lock
/// assert!(downgraded.is_held());
/// # Ok::<(), lock_core::Error>(())
/// ```
pub struct ReadWriteLock<B: DistributedLock> {
    pub(crate) client: LockClient<B>,
    name: LockName,
}

impl<B: DistributedLock> ReadWriteLock<B> {
    /// The read-write lock called `name` of `client`.
    pub fn new(client: &LockClient<B>, name: LockName) -> Self {
        Self { client: client.clone(), name }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Takes the read lock, waiting as long as it takes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no read-write locks; otherwise as
    /// [`Lock::lock`](crate::Lock::lock).
    pub fn read(&self) -> Result<LockGuard<B>> {
        self.forever(Access::Read)
    }

    /// Takes the read lock if no writer holds or waits for it right now; `Ok(None)` otherwise.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn try_read(&self) -> Result<Option<LockGuard<B>>> {
        self.acquire(Access::Read, Deadline::Now)
    }

    /// Takes the read lock, waiting at most `timeout`.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn try_read_for(&self, timeout: Duration) -> Result<Option<LockGuard<B>>> {
        self.acquire(Access::Read, deadline_after(timeout))
    }

    /// Takes the read lock, waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn try_read_until(&self, deadline: Instant) -> Result<Option<LockGuard<B>>> {
        self.acquire(Access::Read, Deadline::until(deadline))
    }

    /// Takes the write lock, waiting as long as it takes.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] when this thread holds the read lock (and not the write lock);
    /// otherwise as [`read`](Self::read).
    pub fn write(&self) -> Result<LockGuard<B>> {
        self.forever(Access::Write)
    }

    /// Takes the write lock if nobody holds the lock right now; `Ok(None)` otherwise.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn try_write(&self) -> Result<Option<LockGuard<B>>> {
        self.acquire(Access::Write, Deadline::Now)
    }

    /// Takes the write lock, waiting at most `timeout`.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn try_write_for(&self, timeout: Duration) -> Result<Option<LockGuard<B>>> {
        self.acquire(Access::Write, deadline_after(timeout))
    }

    /// Takes the write lock, waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn try_write_until(&self, deadline: Instant) -> Result<Option<LockGuard<B>>> {
        self.acquire(Access::Write, Deadline::until(deadline))
    }

    /// How many times the current thread holds the lock in `access` mode (through this client).
    pub fn hold_count(&self, access: Access) -> usize {
        self.client.shared.holds.current(&self.name, slot(access)).map_or(0, |(count, _)| count)
    }

    fn forever(&self, access: Access) -> Result<LockGuard<B>> {
        acquire::until_acquired(&self.client.shared, || self.acquire(access, Deadline::Never))
    }

    fn acquire(&self, access: Access, deadline: Deadline) -> Result<Option<LockGuard<B>>> {
        let shared = &self.client.shared;
        let Some(backend) = shared.backend.read_write() else {
            return Err(Error::Unsupported {
                backend: shared.backend.backend_name(),
                feature: "read-write locks",
            });
        };
        if let Some(answer) = acquire::reentered(shared, &self.name, slot(access), deadline)? {
            return Ok(answer);
        }
        let holds = &shared.holds;
        let owner = match access {
            Access::Write if holds.current(&self.name, HoldSlot::Read).is_some() => {
                return Err(Error::WouldDeadlock { name: self.name.clone() });
            }
            Access::Write => OwnerToken::random(),
            // A writer's read lock is asked under the write lease's owner, which the backend
            // admits past its own write lock.
            Access::Read => holds
                .current(&self.name, HoldSlot::Write)
                .filter(|(_, held)| held.is_held())
                .map_or_else(OwnerToken::random, |(_, held)| held.owner),
        };
        let options = &shared.options;
        let request = Request::new(&self.name, &owner, options.lease, deadline, options.backoff());
        let attempt = shared.observer.attempt(&self.name, Primitive::from(access));
        let acquired = backend.acquire_rw(&request, access);
        acquire::record(shared, (&self.name, slot(access), owner), attempt, acquired)
    }
}

fn slot(access: Access) -> HoldSlot {
    match access {
        Access::Read => HoldSlot::Read,
        Access::Write => HoldSlot::Write,
    }
}

/// The deadline `timeout` from now; a timeout too long to represent is no deadline at all.
pub(crate) fn deadline_after(timeout: Duration) -> Deadline {
    Instant::now().checked_add(timeout).map_or(Deadline::Never, Deadline::until)
}

impl<B: DistributedLock> Clone for ReadWriteLock<B> {
    fn clone(&self) -> Self {
        Self { client: self.client.clone(), name: self.name.clone() }
    }
}

impl<B: DistributedLock> fmt::Debug for ReadWriteLock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name)
            .field("backend", &self.client.shared.backend.backend_name())
            .finish()
    }
}
