//! [`RedisLease`]: one acquisition of a [`RedisBackend`](super::RedisBackend) lock.

use std::time::Duration;

use lock_core::{FencingToken, LockName};

use crate::keys::RedisKeys;

/// One acquisition of a [`RedisBackend`](super::RedisBackend) lock.
#[derive(Debug)]
pub struct RedisLease {
    pub(crate) name: LockName,
    pub(crate) keys: RedisKeys,
    pub(crate) token: String,
    pub(crate) fence: FencingToken,
    pub(crate) lease: Duration,
    /// Raised while the lease's primary is unreachable (replicated deployments only: see
    /// `topology/heartbeat.rs`).
    pub(crate) doubt: Option<lock_core::DoubtSignal>,
}

impl RedisLease {
    /// A grant that may exist under `token` (its fencing token unknown), for clean-up.
    pub(crate) fn in_doubt(name: &LockName, keys: &RedisKeys, token: String, lease: Duration) -> Self {
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
        Self { name: name.clone(), keys: keys.clone(), token, fence, lease, doubt: None }
    }

    /// The server extended the lease to `ttl`: whatever doubt there was is over.
    pub(crate) fn confirmed(&mut self, ttl: Duration) {
        self.lease = ttl;
        if let Some(doubt) = &self.doubt {
            doubt.clear();
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
