//! [`Semaphore`]: a named counting semaphore whose permits are leases.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::abilities::{Deadline, Request};
use crate::acquire;
use crate::backend::DistributedLock;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::name::LockName;
use crate::owner::OwnerToken;
use crate::reentrancy::HoldSlot;
use crate::rw_lock::deadline_after;

/// Tells each permit's hold apart in the hold table: permits are never re-entered.
static NEXT_PERMIT: AtomicU64 = AtomicU64::new(0);

/// A named semaphore of a [`LockClient`] with a fixed number of permits — Redisson's
/// `RPermitExpirableSemaphore`, Curator's `InterProcessSemaphoreV2`. Cheap to clone. Its name is
/// its own: it never contends with the [`Lock`](crate::Lock) of the same name.
///
/// # Contract
/// - At most `permits` permits of the name are held at once, across every client; each
///   acquisition takes one permit, including a second one on the same thread (permits are not
///   reentrant, as Java's `Semaphore`'s are not).
/// - A permit is a lease: renewed while held, reported lost on time, and returned by the server
///   when its holder crashes (at the lease's end, or the session's for session-bound backends).
/// - Every client of a name must use one count: a different count while permits are held is
///   refused with [`Error::PermitsMismatch`].
///
/// ```
/// use lock_core::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let api = client.semaphore("fragile-api", 2)?;
/// let first = api.acquire()?;
/// let second = api.try_acquire()?.expect("a second permit");
/// assert!(api.try_acquire()?.is_none()); // both permits are out
/// drop(first);
/// assert!(api.try_acquire()?.is_some());
/// # drop(second);
/// # Ok::<(), lock_core::Error>(())
/// ```
pub struct Semaphore<B: DistributedLock> {
    client: LockClient<B>,
    name: LockName,
    permits: u32,
}

/// Refuses a semaphore of zero permits: every [`Permits`](crate::Permits) backend checks the
/// count it is asked for with this, as [`Semaphore::new`] does.
///
/// # Errors
/// [`Error::InvalidConfig`] for zero permits.
pub fn check_permits(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid_config("a semaphore needs at least one permit"));
    }
    Ok(())
}

impl<B: DistributedLock> Semaphore<B> {
    /// The semaphore called `name` of `client`, with `permits` permits.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for zero permits.
    pub fn new(client: &LockClient<B>, name: LockName, permits: u32) -> Result<Self> {
        check_permits(permits)?;
        Ok(Self { client: client.clone(), name, permits })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// How many permits the semaphore has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes a permit, waiting as long as it takes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no semaphores; [`Error::PermitsMismatch`] when
    /// the permits held on the server were taken with another count; otherwise as
    /// [`Lock::lock`](crate::Lock::lock).
    pub fn acquire(&self) -> Result<LockGuard<B>> {
        acquire::until_acquired(&self.client.shared, || self.acquire_by(Deadline::Never))
    }

    /// Takes a permit if one is free right now; `Ok(None)` otherwise.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<LockGuard<B>>> {
        self.acquire_by(Deadline::Now)
    }

    /// Takes a permit, waiting at most `timeout`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<LockGuard<B>>> {
        self.acquire_by(deadline_after(timeout))
    }

    /// Takes a permit, waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<LockGuard<B>>> {
        self.acquire_by(Deadline::until(deadline))
    }

    fn acquire_by(&self, deadline: Deadline) -> Result<Option<LockGuard<B>>> {
        let shared = &self.client.shared;
        let Some(backend) = shared.backend.permits() else {
            return Err(Error::Unsupported { backend: shared.backend.backend_name(), feature: "semaphores" });
        };
        if shared.is_closed() {
            return Err(Error::Closed);
        }
        let owner = OwnerToken::random();
        let options = &shared.options;
        let request = Request::new(&self.name, &owner, options.lease, deadline, options.backoff());
        let slot = HoldSlot::Permit(NEXT_PERMIT.fetch_add(1, Ordering::Relaxed));
        let attempt = shared.observer.attempt(&self.name, slot.primitive());
        let acquired = backend.acquire_permit(&request, self.permits);
        acquire::record(shared, (&self.name, slot, owner), attempt, acquired)
    }
}

impl<B: DistributedLock> Clone for Semaphore<B> {
    fn clone(&self) -> Self {
        Self { client: self.client.clone(), name: self.name.clone(), permits: self.permits }
    }
}

impl<B: DistributedLock> fmt::Debug for Semaphore<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .field("backend", &self.client.shared.backend.backend_name())
            .finish()
    }
}
