//! [`EtcdLease`]: one held lock — its key, its create revision, the client lease it lives on, and
//! what keeps the key apart while it holds: the mutex's local slot that keeps the client's other
//! threads off its name, or the share of a write lock's key with its downgraded read.

use std::fmt;
use std::sync::{Arc, Weak};

use lock_core::{FencingToken, LockName};

use crate::backend::Inner;
use crate::keep_alive::ClientLease;
use crate::read_write::SharedKey;
use crate::slots::SlotGuard;

/// A lock held by a key attached to the client's lease: `<prefix>/<lease hex>` for a mutex,
/// `<prefix>/read/<unix nanos>` or `<prefix>/write/<unix nanos>` for a read-write lock,
/// `<prefix>/<unix nanos>` for a permit.
///
/// Dropped without [`release`](lock_core::DistributedLock::release) (lock-core does that only
/// when a release got no answer), its key is deleted in the background — or goes with the
/// lease.
pub struct EtcdLease {
    pub(crate) name: LockName,
    pub(crate) key: String,
    pub(crate) create_revision: i64,
    pub(crate) lease: Arc<ClientLease>,
    /// Whether the hold excludes every other (a mutex, a write lock, a leadership), not shared
    /// (a read lock, a permit): only an exclusive hold may guard a write.
    pub(crate) exclusive: bool,
    /// `None` once released (or handed to a clean-up).
    pub(crate) held: Option<Held>,
}

/// What a lease keeps while it holds: the local slot of a mutex's name, the share of a write
/// lock's key, and the way back to the backend to delete its key if dropped.
pub(crate) struct Held {
    /// The mutex's local slot (its key is the client's for the name); `None` for keys of their
    /// own (read-write locks, permits).
    pub(crate) slot: Option<SlotGuard>,
    pub(crate) backend: Weak<Inner>,
    /// A write lock's key, shared with the reads its owner takes under it (a downgrade): deleted
    /// by the last of them to go (see [`crate::read_write`]).
    pub(crate) shared: Option<Arc<SharedKey>>,
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
        let Some(Held { slot, backend, shared }) = self.held.take() else { return };
        let Some(inner) = backend.upgrade() else { return };
        let backend = crate::EtcdBackend { inner };
        // Another lease of this client still holds a shared key; a lost lease took it.
        if !backend.leave_key(self, shared) || self.lease.is_lost() {
            return;
        }
        let key = std::mem::take(&mut self.key);
        backend.abandon(key, self.create_revision, Arc::clone(&self.lease), slot);
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
