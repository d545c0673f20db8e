//! [`LockClient`]: a backend plus the options, hold counts and renewal table its locks share.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend::DistributedLock;
use crate::election::Election;
use crate::error::Result;
use crate::lock::Lock;
use crate::multi::MultiLock;
use crate::name::LockName;
use crate::observe::Observer;
use crate::options::LockOptions;
use crate::reentrancy::HoldTable;
use crate::renewal::LeaseTable;
use crate::rw_lock::ReadWriteLock;
use crate::semaphore::Semaphore;

/// The entry point: hands out [`Lock`]s by name over one backend.
///
/// A client is one *owner* as far as reentrancy goes: a thread that holds a lock through a client
/// may lock it again through the same client. Two clients (even in one process, even over one
/// backend) contend like two processes. Cloning is cheap and shares everything.
///
/// # Shutdown
/// [`close`](Self::close) — or dropping the last handle (the last `LockClient`, [`Lock`] or
/// [`LockGuard`](crate::LockGuard) of it: a guard keeps its client alive, as lock_api's
/// `ArcMutexGuard` keeps its `Arc`) — releases every lock the client still holds and stops
/// renewing them. When the process exits without that (a panic with `abort`, `exit`, a kill, a leaked
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
    /// Spans and metrics of this client's locks.
    pub(crate) observer: Arc<Observer>,
    /// Handles alive: `LockClient` values (each `Lock` holds one) and guards. The last one to go
    /// closes the client.
    handles: AtomicUsize,
}

/// The most threads [`Shared::close`] releases holds on at once.
const CLOSE_THREADS: usize = 16;

impl<B: DistributedLock> Shared<B> {
    pub(crate) fn is_closed(&self) -> bool {
        self.holds.is_closed()
    }

    /// Counts a new handle (a guard).
    pub(crate) fn add_handle(&self) {
        self.handles.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops a handle; the last one closes the client.
    pub(crate) fn drop_handle(&self) {
        if self.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Err(error) = self.close() {
                let error = self.observer.describe(&error);
                tracing::warn!(%error, "releasing the locks of a dropped lock client failed");
            }
        }
    }

    /// Refuses later acquisitions and releases every hold, up to [`CLOSE_THREADS`] at once. Once
    /// a release gets no answer, the holds not yet released are dropped without asking (a lease
    /// runs out on its own, a session hold ends with its connection), so closing takes about one
    /// call's time against a silent server, however many holds there are.
    pub(crate) fn close(&self) -> Result<()> {
        let Some(holds) = self.holds.close() else { return Ok(()) };
        let next = AtomicUsize::new(0);
        let unanswered = AtomicBool::new(false);
        let first_error = parking_lot::Mutex::new(None);
        let release_some = || loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(held) = holds.get(index) else { return };
            let released = if unanswered.load(Ordering::Acquire) {
                held.abandon();
                Ok(())
            } else {
                held.release(&self.backend)
            };
            self.leases.note_released();
            if let Err(error) = released {
                if error.is_retryable() {
                    unanswered.store(true, Ordering::Release);
                }
                first_error.lock().get_or_insert(error);
            }
        };
        let threads = holds.len().min(CLOSE_THREADS);
        if threads <= 1 {
            release_some();
        } else {
            std::thread::scope(|scope| {
                for _ in 1..threads {
                    // Without a thread, this one does the work alone.
                    let _ = std::thread::Builder::new()
                        .name("distlock-close".into())
                        .spawn_scoped(scope, release_some);
                }
                release_some();
            });
        }
        first_error.into_inner().map_or(Ok(()), Err)
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
        let observer = Arc::new(Observer::new(&*backend, &options));
        let leases = LeaseTable::new(Arc::clone(&backend), Arc::clone(&observer));
        let holds = HoldTable::new();
        let shared = Shared { backend, options, holds, leases, observer, handles: AtomicUsize::new(1) };
        Self { shared: Arc::new(shared) }
    }

    /// The lock called `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) when `name` breaks the [`LockName`] rules.
    pub fn lock_named(&self, name: &str) -> Result<Lock<B>> {
        Ok(Lock::new(self, LockName::new(name)?))
    }

    /// The locks called `names`, to be taken together, all or nothing (see [`MultiLock`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) when a name breaks the [`LockName`]
    /// rules; [`Error::InvalidConfig`](crate::Error::InvalidConfig) for no names at all.
    pub fn multi_lock<S: AsRef<str>>(&self, names: impl IntoIterator<Item = S>) -> Result<MultiLock<B>> {
        let names = names.into_iter().map(|name| LockName::new(name.as_ref())).collect::<Result<Vec<_>>>()?;
        MultiLock::new(self, names)
    }

    /// The read-write lock called `name` (see [`ReadWriteLock`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) when `name` breaks the [`LockName`] rules.
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock<B>> {
        Ok(ReadWriteLock::new(self, LockName::new(name)?))
    }

    /// The semaphore called `name` with `permits` permits (see [`Semaphore`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) when `name` breaks the [`LockName`]
    /// rules; [`Error::InvalidConfig`](crate::Error::InvalidConfig) for zero permits.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore<B>> {
        Semaphore::new(self, LockName::new(name)?, permits)
    }

    /// The election called `name` (see [`Election`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) when `name` breaks the [`LockName`] rules.
    pub fn election(&self, name: &str) -> Result<Election<B>> {
        Ok(Election::new(self, LockName::new(name)?))
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
    /// nothing. An acquisition racing with `close` either finishes first and is released by it,
    /// or returns [`Error::Closed`](crate::Error::Closed). Closing again does nothing.
    ///
    /// Holds are released concurrently; once one release gets no answer, the rest are dropped
    /// without asking, so closing is bounded by about one connect and one I/O timeout.
    ///
    /// # Errors
    /// The first error a release returned (a lock the server could not be asked about runs out
    /// on its own, or ends with its session).
    pub fn close(&self) -> Result<()> {
        self.shared.close()
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
        self.shared.drop_handle();
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
