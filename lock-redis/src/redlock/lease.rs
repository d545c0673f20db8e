//! [`RedlockLease`]: one acquisition of a [`RedlockBackend`](super::RedlockBackend) lock.

use std::time::{Duration, Instant};

use lock_core::{FencingToken, LockName};

use crate::keys::RedisKeys;

/// One acquisition of a [`RedlockBackend`](super::RedlockBackend) lock, with the validity Redlock computed for it.
#[derive(Debug)]
pub struct RedlockLease {
    pub(super) name: LockName,
    pub(super) keys: RedisKeys,
    pub(super) token: String,
    pub(super) fence: FencingToken,
    pub(super) lease: Duration,
    pub(super) elapsed: Duration,
    pub(super) validity: Duration,
    pub(super) valid_until: Instant,
    pub(super) granted: Vec<usize>,
}

impl RedlockLease {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The lock's Redis keys (the same on every node).
    pub fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    /// The value stored with the lock on each node: the owner token (32 hex digits), a colon and
    /// 16 hex digits unique to the acquisition attempt that took it, so that undoing one attempt
    /// can never delete another's grant. Extend and release compare against it.
    pub fn owner_token(&self) -> &str {
        &self.token
    }

    /// The fencing token issued with this acquisition (best effort: see the module docs).
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }

    /// The lease requested from the nodes by the acquisition or the latest extension.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How long the acquisition (or the latest extension) took, from before the first request
    /// to after the last reply.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// How long the lock was valid for when the acquisition (or the latest extension) returned:
    /// `lease − elapsed − drift` ([`RedlockBackend::clock_drift`](super::RedlockBackend::clock_drift)). Always above zero.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// Until when, by this process's clock, the lock is valid: the start of the acquisition (or
    /// the latest extension) plus `lease − drift`.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Which nodes granted the acquisition (indexes into the builder's URL list).
    pub fn granted_nodes(&self) -> &[usize] {
        &self.granted
    }
}
