//! N06 — Redlock without fencing (source 002: Redlock "has no facility for generating fencing
//! tokens"; source 003: a node restarting without persistence hands the lock to a second holder).
//!
//! [`UnfencedRedlock`] is the real [`RedlockBackend`] with its fencing tokens taken away, as every
//! Redlock library the sources mention ships it. It acquires, extends and releases exactly like
//! Redlock; but when a node restart (scenario R02) lets B acquire while A still believes it holds
//! the lock, A's stale write carries nothing a resource could reject. It must fail R02
//! ([`crate::testkit::redlock::r02`]).

use std::time::Duration;

use crate::{RedlockBackend, RedlockLease};
use lock_core::{DistributedLock, Extension, HoldKind, LockName, OwnerToken, Result};

/// Redlock whose holders carry no fencing tokens. Waiters back off between attempts.
#[derive(Debug, Clone)]
pub struct UnfencedRedlock {
    inner: RedlockBackend,
}

impl UnfencedRedlock {
    /// `inner` without its fencing tokens.
    pub fn new(inner: RedlockBackend) -> Self {
        Self { inner }
    }

    /// Redlock over the nodes at `urls`, without fencing tokens.
    ///
    /// # Errors
    /// As [`RedlockBackend::new`].
    pub fn connect(urls: &[String]) -> Result<Self> {
        Ok(Self::new(RedlockBackend::new(urls)?))
    }
}

impl DistributedLock for UnfencedRedlock {
    type Lease = RedlockLease;

    fn backend_name(&self) -> &'static str {
        "redlock (no fencing)"
    }

    fn hold_kind(&self) -> HoldKind {
        self.inner.hold_kind()
    }

    fn lease_margin(&self, ttl: Duration) -> Duration {
        self.inner.lease_margin(ttl)
    }

    fn try_acquire(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Option<RedlockLease>> {
        self.inner.try_acquire(name, owner, ttl)
    }

    fn extend(&self, lease: &mut RedlockLease, ttl: Duration) -> Result<bool> {
        self.inner.extend(lease, ttl)
    }

    fn extend_many(&self, batch: &mut [Extension<'_, RedlockLease>]) -> Vec<Result<bool>> {
        self.inner.extend_many(batch)
    }

    fn release(&self, lease: RedlockLease) -> Result<bool> {
        self.inner.release(lease)
    }

    // `fencing()` keeps its default, `None`: the recipe's flaw.
}
