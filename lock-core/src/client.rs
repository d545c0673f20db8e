//! [`LockClient`]: a backend plus the options, hold counts and renewal table its locks share.

use std::fmt;
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
}

impl<B: DistributedLock> LockClient<B> {
    /// A client over `backend` with [`LockOptions::default`].
    ///
    /// # Panics
    /// When the process-wide renewal thread cannot be spawned (the OS is out of threads).
    pub fn new(backend: B) -> Self {
        Self::with_options(backend, LockOptions::default())
    }

    /// A client over `backend` with `options`.
    ///
    /// # Panics
    /// When the process-wide renewal thread cannot be spawned (the OS is out of threads).
    pub fn with_options(backend: B, options: LockOptions) -> Self {
        let backend = Arc::new(backend);
        let leases = LeaseTable::new(Arc::clone(&backend));
        Self { shared: Arc::new(Shared { backend, options, holds: HoldTable::new(), leases }) }
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
}

impl<B: DistributedLock> Clone for LockClient<B> {
    fn clone(&self) -> Self {
        Self { shared: Arc::clone(&self.shared) }
    }
}

impl<B: DistributedLock> fmt::Debug for LockClient<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.shared.backend.backend_name())
            .field("options", &self.shared.options)
            .finish()
    }
}
