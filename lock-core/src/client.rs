//! [`LockClient`]: a backend plus the options, hold counts and renewal table its locks share.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend::DistributedLock;
use crate::error::Result;
use crate::lock::Lock;
use crate::name::LockName;
use crate::options::LockOptions;
use crate::reentrancy::HoldTable;
use crate::renewal::LeaseTable;

/// The entry point: hands out [`Lock`]s by name over one backend.
///
/// A client is one *owner* as far as reentrancy goes: a thread that holds a lock through a client
/// may lock it again through the same client. Two clients (even in one process, even over one
/// backend) contend like two processes. Cloning is cheap and shares everything.
///
/// # Shutdown
/// [`close`](Self::close) — or dropping the last handle (the last `LockClient` or [`Lock`] of
/// it; guards do not count) — releases every lock the client still holds and stops renewing
/// them. When the process exits without that (a panic with `abort`, `exit`, a kill, a leaked
/// client), nothing is released by the process: a lease stays held on the server until it
/// runs out (at most the lease after the last renewal), while a hold bound to a connection or
/// session (row and advisory locks, ZooKeeper) ends as soon as the OS closes the connection or
/// the session times out.
///
/// ```
/// use lock_core::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let lock = client.lock_named("orders:42")?;
/// let guard = lock.lock()?;
/// assert!(guard.is_held());
/// guard.unlock()?;
/// # Ok::<(), lock_core::Error>(())
/// ```
pub struct LockClient<B: DistributedLock> {
    pub(crate) shared: Arc<Shared<B>>,
}

pub(crate) struct Shared<B: DistributedLock> {
    pub(crate) backend: Arc<B>,
    pub(crate) options: LockOptions,
    pub(crate) holds: HoldTable<B>,
    pub(crate) leases: Arc<LeaseTable<B>>,
    /// `LockClient` values alive (each `Lock` holds one); guards hold `Shared` without counting.
    handles: AtomicUsize,
    closed: AtomicBool,
}

impl<B: DistributedLock> Shared<B> {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

impl<B: DistributedLock> LockClient<B> {
    /// A client over `backend` with [`LockOptions::default`].
    ///
    /// # Panics
    /// When the process-wide renewal timer thread cannot be spawned (the OS is out of threads).
    pub fn new(backend: B) -> Self {
        Self::with_options(backend, LockOptions::default())
    }

    /// A client over `backend` with `options`.
    ///
    /// # Panics
    /// When the process-wide renewal timer thread cannot be spawned (the OS is out of threads).
    pub fn with_options(backend: B, options: LockOptions) -> Self {
        let backend = Arc::new(backend);
        let leases = LeaseTable::new(Arc::clone(&backend));
        let shared = Shared {
            backend,
            options,
            holds: HoldTable::new(),
            leases,
            handles: AtomicUsize::new(1),
            closed: AtomicBool::new(false),
        };
        Self { shared: Arc::new(shared) }
    }

    /// The lock called `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) when `name` breaks the [`LockName`] rules.
    pub fn lock_named(&self, name: &str) -> Result<Lock<B>> {
        Ok(Lock::new(self, LockName::new(name)?))
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The options every lock of this client uses.
    pub fn options(&self) -> &LockOptions {
        &self.shared.options
    }

    /// Releases every lock this client holds, stops renewing them, and refuses further
    /// acquisitions with [`Error::Closed`](crate::Error::Closed). Guards of the released locks
    /// then report [`HoldState::Released`](crate::HoldState::Released); their unlock does
    /// nothing. Closing again does nothing.
    ///
    /// # Errors
    /// The first error a release returned (every lock is still tried; one the server could not
    /// be asked about runs out on its own, or ends with its session).
    pub fn close(&self) -> Result<()> {
        if self.shared.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut outcome = Ok(());
        for held in self.shared.holds.drain() {
            let released = held.release(&self.shared.backend);
            self.shared.leases.note_released();
            if let (Err(error), Ok(())) = (released, &outcome) {
                outcome = Err(error);
            }
        }
        outcome
    }
}

impl<B: DistributedLock> Clone for LockClient<B> {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        Self { shared: Arc::clone(&self.shared) }
    }
}

impl<B: DistributedLock> Drop for LockClient<B> {
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Err(error) = self.close() {
                tracing::warn!(%error, "releasing the locks of a dropped lock client failed");
            }
        }
    }
}

impl<B: DistributedLock> fmt::Debug for LockClient<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.shared.backend.backend_name())
            .field("options", &self.shared.options)
            .field("closed", &self.shared.is_closed())
            .finish()
    }
}
