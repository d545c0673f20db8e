//! [`EtcdLease`]: one held lock — its key, its create revision, the client lease it lives on, and
//! the local slot that keeps the client's other threads off its name.

use std::fmt;
use std::sync::{Arc, Weak};

use lock_core::{FencingToken, LockName};

use crate::backend::Inner;
use crate::keep_alive::ClientLease;
use crate::slots::SlotGuard;

/// A lock held by a key `<prefix>/<lease hex>` attached to the client's lease.
///
/// Dropped without [`release`](lock_core::DistributedLock::release) (lock-core does that only
/// when a release got no answer), its key is deleted in the background — or goes with the
/// lease.
pub struct EtcdLease {
    pub(crate) name: LockName,
    pub(crate) key: String,
    pub(crate) create_revision: i64,
    pub(crate) lease: Arc<ClientLease>,
    /// `None` once released (or handed to a clean-up).
    pub(crate) held: Option<Held>,
}

/// What a lease keeps while it holds: the local slot of its name, and the way back to the
/// backend to delete its key if dropped.
pub(crate) struct Held {
    pub(crate) slot: SlotGuard,
    pub(crate) backend: Weak<Inner>,
}

impl EtcdLease {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// This holder's key: `<prefix>/<lease id in lower-case hex>`, as `etcdctl lock` shows it
    /// (and exports as `ETCD_LOCK_KEY`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key's create revision: the fencing token, and what a transaction checks to act only
    /// while this hold lasts (Go's `Mutex.IsOwner()`: `create_revision(key) == this`).
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// The id of the client lease the key is attached to.
    pub fn lease_id(&self) -> i64 {
        self.lease.id
    }

    /// The fencing token: the key's create revision.
    pub fn fencing_token(&self) -> FencingToken {
        revision_token(self.create_revision)
    }
}

/// The fencing token of a key created at `revision` (revisions are positive).
pub(crate) fn revision_token(revision: i64) -> FencingToken {
    FencingToken::new(u64::try_from(revision).unwrap_or_default())
}

impl Drop for EtcdLease {
    fn drop(&mut self) {
        let Some(Held { slot, backend }) = self.held.take() else { return };
        if self.lease.is_lost() {
            return;
        }
        if let Some(inner) = backend.upgrade() {
            let key = std::mem::take(&mut self.key);
            crate::EtcdBackend { inner }.abandon(key, self.create_revision, Arc::clone(&self.lease), slot);
        }
    }
}

impl fmt::Debug for EtcdLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLease")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("create_revision", &self.create_revision)
            .field("lease", &format_args!("{:x}", self.lease.id))
            .finish_non_exhaustive()
    }
}
