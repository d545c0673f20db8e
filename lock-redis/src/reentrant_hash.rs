//! The reentrant hash lock (`RedisLockKind::ReentrantHash`): Redisson's layout from sources 001
//! and 004.
//!
//! The lock is a hash `{ <owner token>: <hold count> }` with the lease as its TTL:
//! - **Acquire** (one script): when the lock and its queue are both absent (one `EXISTS` of the
//!   two keys), `HSET lock <token> 1`, `PEXPIRE` and `INCR fence` (a fresh acquisition takes the
//!   next fencing token); when the hash already has the caller's token, `HINCRBY` counts one
//!   more hold and raises the lease if it was shorter (the fencing token stays the one issued
//!   with the first hold); otherwise the wait queue decides.
//! - **Release**: `HGET` the caller's count; while holds remain `HINCRBY -1` and the lease is left
//!   as it is; at the last one the key is deleted and, with waiters queued, the release is
//!   published to the head.
//! - **Extend**: `PEXPIRE` if the hash has the caller's token.
//!
//! [`lock_core::Lock`] already counts reentry per thread and draws a fresh token per
//! acquisition, so through it every hold count is 1. The server-side count matters to callers
//! of the [`DistributedLock`](lock_core::DistributedLock) trait that present the same
//! [`OwnerToken`](lock_core::OwnerToken) twice (for instance one token per process).

use std::sync::LazyLock;

use crate::lua::LockScripts;

/// The scripts of this kind.
pub(crate) fn scripts() -> &'static LockScripts {
    static SCRIPTS: LazyLock<LockScripts> = LazyLock::new(|| {
        LockScripts::new(
            include_str!("scripts/hash_acquire.lua"),
            include_str!("scripts/hash_extend.lua"),
            include_str!("scripts/hash_release.lua"),
            include_str!("scripts/hash_dequeue.lua"),
        )
    });
    &SCRIPTS
}

/// [`scripts`] publishing with `SPUBLISH`, for a cluster.
pub(crate) fn sharded_scripts() -> &'static LockScripts {
    static SCRIPTS: LazyLock<LockScripts> = LazyLock::new(|| scripts().sharded());
    &SCRIPTS
}
