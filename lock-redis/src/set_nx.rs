//! The single-node lock (`RedisLockKind::SetNx`), the docs' recommended recipe made whole.
//!
//! - **Acquire**: `SET lock <token> NX PX <lease>` and `INCR fence`, with `EXISTS queue`, in one
//!   `MULTI`/`EXEC` transaction, so the expiry and the fencing token come with the acquisition in
//!   one atomic step and one round trip (a crash can never leave an immortal lock, sources
//!   000/001). Plain commands cost the server a fraction of a script (`distlock bench` measures
//!   both). When the lock is contended, the acquire script and the fair wait queue take over:
//!   a release with waiters queued leaves the lock *reserved* for the head's turn
//!   (`turn:<token>`, 250 ms), so the transaction's `SET NX` cannot take it in the head's place;
//!   and a transaction that finds waiters queued behind a free lock hands it straight back.
//! - **Extend / release**: compare the stored token with the caller's, then `PEXPIRE` / `DEL`, in
//!   one script: a holder whose lease ran out can never extend or delete the next holder's lock
//!   (sources 002/004).
//! - The value is the caller's [`OwnerToken`](lock_core::OwnerToken) (128 random bits, in hex),
//!   fresh for every acquisition.
//!
//! The lock is not reentrant on the server: the same token acquiring again is refused (reentrancy
//! per thread is [`lock_core::Lock`]'s job).

use std::sync::LazyLock;

use crate::lua::LockScripts;

/// The scripts of this kind.
pub(crate) fn scripts() -> &'static LockScripts {
    static SCRIPTS: LazyLock<LockScripts> = LazyLock::new(|| {
        LockScripts::new(
            include_str!("scripts/set_nx_acquire.lua"),
            include_str!("scripts/set_nx_extend.lua"),
            include_str!("scripts/set_nx_release.lua"),
            include_str!("scripts/set_nx_dequeue.lua"),
        )
    });
    &SCRIPTS
}

/// [`scripts`] publishing with `SPUBLISH`, for a cluster.
pub(crate) fn sharded_scripts() -> &'static LockScripts {
    static SCRIPTS: LazyLock<LockScripts> = LazyLock::new(|| scripts().sharded());
    &SCRIPTS
}
