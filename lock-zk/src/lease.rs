//! [`ZooKeeperLease`]: one held lock — its node, the session that owns it, its fencing token.

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
