//! [`ZooKeeperLease`]: one held lock — its node, the session that owns it, its fencing token.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use futures::FutureExt as _;
use lock_core::{FencingToken, LockName};
use zookeeper_client as zk;

/// A lock held by an ephemeral-sequential node of one session.
#[derive(Debug)]
pub struct ZooKeeperLease {
    pub(crate) name: LockName,
    /// The full path of the lock node.
    pub(crate) node: String,
    /// The id of the session that created (and owns) the node.
    pub(crate) session: i64,
    /// The fencing token (see [`fencing_token`](Self::fencing_token)).
    pub(crate) fence: FencingToken,
    /// The watch on the node.
    pub(crate) watch: NodeWatch,
}

impl ZooKeeperLease {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The full path of this holder's node: `<root>/<name>/_c_<uuid>-lock-<sequence>` for a
    /// mutex, `<root>/%read-write/<name>/_c_<uuid>-__READ__…` or `…-__WRIT__…` for a read-write
    /// lock, `<root>/%semaphore/<name>/leases/_c_<uuid>-lease-<sequence>` for a permit,
    /// `<root>/%election/<name>/_c_<uuid>-latch-<sequence>` for a leadership.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The fencing token: the node's creation zxid (`czxid`) for a mutex, a permit or a
    /// leadership; for a
    /// read-write lock, the parent's `pzxid` when the hold was confirmed (see the crate docs).
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }
}

/// The fencing token of a node created (or a listing taken) at `zxid`: zxids are positive.
pub(crate) fn zxid_token(zxid: i64) -> FencingToken {
    FencingToken::new(u64::try_from(zxid).unwrap_or_default())
}

/// The watch on a held node, set by its first liveness check (holds shorter than a renewal
/// interval never pay for one) and looked at by each later check, right after that check's
/// round trip: ZooKeeper delivers a watch event before the reply to any later request of the
/// session, so a deletion is seen by the first check after it, never later.
pub(crate) enum NodeWatch {
    /// Not set yet, or spent by an event that was not a deletion.
    Unset,
    /// Set: the event, when it comes.
    Set(Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>),
    /// The node was deleted (by anyone, this holder's release included).
    Deleted,
}

impl NodeWatch {
    /// Takes in whatever event has come (no waiting).
    pub(crate) fn poll_event(&mut self) {
        if let NodeWatch::Set(event) = self {
            match event.as_mut().now_or_never() {
                Some(event) if event.event_type == zk::EventType::NodeDeleted => *self = NodeWatch::Deleted,
                Some(_) => *self = NodeWatch::Unset,
                None => {}
            }
        }
    }
}

impl fmt::Debug for NodeWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeWatch::Unset => "Unset",
            NodeWatch::Set(_) => "Set",
            NodeWatch::Deleted => "Deleted",
        })
    }
}
