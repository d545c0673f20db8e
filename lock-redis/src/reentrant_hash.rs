//! The reentrant hash lock (`RedisLockKind::ReentrantHash`): Redisson's layout from seeds 001
//! and 004.
//!
//! The lock is a hash `{ <owner token>: <hold count> }` with the lease as its TTL:
//! - **Acquire**: when the key is free, `HINCRBY lock <token> 1`, `PEXPIRE` and `INCR fence` (a
//!   fresh acquisition takes the next fencing token); when the hash already has the caller's
//!   token, `HINCRBY` counts one more hold and renews the lease (the fencing token stays the one
//!   issued with the first hold).
//! - **Release**: `HINCRBY -1`; while holds remain the lease is renewed, at zero the key is
//!   deleted and the release published to waiters.
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
