//! [`ZooKeeperLease`]: one held lock — its node, the session that owns it, its fencing token.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use lock_core::{FencingToken, LockName};

/// A lock held by an ephemeral-sequential node of one session.
#[derive(Debug)]
pub struct ZooKeeperLease {
    pub(crate) name: LockName,
    /// The full path of the lock node.
    pub(crate) node: String,
    /// The id of the session that created (and owns) the node.
    pub(crate) session: i64,
    /// The node's creation zxid.
    pub(crate) fence: FencingToken,
    /// What the watch on the node knows, shared with the task that waits on it.
    pub(crate) watch: Arc<NodeWatch>,
}

impl ZooKeeperLease {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The full path of this holder's lock node (`<root>/<name>/_c_<uuid>-lock-<sequence>`).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The fencing token: the lock node's creation zxid (`czxid`).
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }
}

/// What the watch on a held node knows. The first liveness check sets the watch (holds shorter
/// than a renewal interval never pay for one); the task waiting on it records a deletion, or that
/// the watch is spent without one (the next check sets it again).
#[derive(Debug, Default)]
pub(crate) struct NodeWatch(AtomicU8);

impl NodeWatch {
    const UNWATCHED: u8 = 0;
    const WATCHED: u8 = 1;
    const DELETED: u8 = 2;

    pub(crate) fn is_deleted(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::DELETED
    }

    pub(crate) fn needs_watch(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::UNWATCHED
    }

    pub(crate) fn watched(&self) {
        let _ = self.0.compare_exchange(Self::UNWATCHED, Self::WATCHED, Ordering::AcqRel, Ordering::Acquire);
    }

    pub(crate) fn deleted(&self) {
        self.0.store(Self::DELETED, Ordering::Release);
    }

    pub(crate) fn spent(&self) {
        let _ = self.0.compare_exchange(Self::WATCHED, Self::UNWATCHED, Ordering::AcqRel, Ordering::Acquire);
    }
}
