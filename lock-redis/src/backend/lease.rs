//! [`RedisLease`]: one acquisition of a [`RedisBackend`](super::RedisBackend) lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{DoubtMark, DoubtSignal, FencingToken, LockName, Primitive};

use crate::keys::RedisKeys;
use crate::topology::{Heartbeat, Node};

/// One acquisition of a [`RedisBackend`](super::RedisBackend) lock.
#[derive(Debug)]
pub struct RedisLease {
    pub(crate) name: LockName,
    pub(crate) keys: RedisKeys,
    pub(crate) token: String,
    pub(crate) fence: FencingToken,
    pub(crate) lease: Duration,
    /// Which primitive the lease holds (the scripts that extend and release it follow).
    pub(crate) primitive: Primitive,
    /// Raised while the lease's primary is unreachable (replicated deployments only: see
    /// `topology/heartbeat.rs`).
    pub(crate) watch: Option<LeaseWatch>,
}

/// A lease's doubt signal and the node whose failures raise it.
pub(crate) struct LeaseWatch {
    pub(crate) signal: DoubtSignal,
    pub(crate) node: Arc<Node>,
}

impl fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("in_doubt", &self.signal.is_raised())
            .field("node", &self.node.address)
            .finish()
    }
}

impl RedisLease {
    /// A grant that may exist under `token` (its fencing token unknown), for clean-up.
    pub(crate) fn possible_grant(name: &LockName, keys: &RedisKeys, token: String, lease: Duration) -> Self {
        Self::granted(name, keys, token, 0, lease)
    }

    /// A grant of `name` to `token`, with the fencing token the server issued.
    pub(crate) fn granted(
        name: &LockName,
        keys: &RedisKeys,
        token: String,
        fence: i64,
        lease: Duration,
    ) -> Self {
        let fence = FencingToken::new(u64::try_from(fence).unwrap_or(0));
        Self {
            name: name.clone(),
            keys: keys.clone(),
            token,
            fence,
            lease,
            primitive: Primitive::Mutex,
            watch: None,
        }
    }

    /// The same grant, of another primitive.
    pub(crate) fn with_primitive(self, primitive: Primitive) -> Self {
        Self { primitive, ..self }
    }

    /// Whether the lease holds a mutex's layout of keys — a lock's mutex, or an election's lock
    /// (the mutex of [`RedisKeys::election`]) — extended and released by the kind's scripts.
    pub(crate) fn on_mutex_keys(&self) -> bool {
        matches!(self.primitive, Primitive::Mutex | Primitive::Leader)
    }

    /// Taken before sending a request that may confirm the lease (see [`confirmed`](Self::confirmed)).
    pub(crate) fn doubt_mark(&self) -> Option<DoubtMark> {
        self.watch.as_ref().map(|watch| watch.signal.mark())
    }

    /// `node` extended the lease to `ttl`, in answer to a request sent at `mark`: the doubt
    /// raised before that is over, and from now on `node`'s failures are the ones that raise it.
    pub(crate) fn confirmed(
        &mut self,
        ttl: Duration,
        mark: Option<DoubtMark>,
        node: &Arc<Node>,
        heartbeat: &Arc<Heartbeat>,
    ) {
        self.lease = ttl;
        if let (Some(watch), Some(mark)) = (&mut self.watch, mark) {
            watch.signal.clear_since(mark);
            if !Arc::ptr_eq(&watch.node, node) {
                heartbeat.move_watch(&watch.signal, &watch.node, node);
                watch.node = Arc::clone(node);
            }
        }
    }

    /// An extension got no answer: the lease may be gone with its primary.
    pub(crate) fn unconfirmed(&self) {
        if let Some(watch) = &self.watch {
            watch.signal.raise();
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The lock's Redis keys.
    pub fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    /// The owner token stored with the lock, as 32 hex digits.
    pub fn owner_token(&self) -> &str {
        &self.token
    }

    /// The fencing token issued with this acquisition.
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }
}
