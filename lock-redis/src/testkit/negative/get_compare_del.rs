//! N04 — `GET`, compare in the client, then `DEL`, as separate commands (source 003, "解锁操作的
//! 原子性"): the value is a unique token, but between the compare and the delete the lease can
//! run out and the next holder acquire; the `DEL` then removes the next holder's lock.
//!
//! The pause that makes the window visible is injected between `GET` and `DEL`:
//! [`RELEASE_PAUSE`], longer than what S06 leaves of its lease when it starts releasing (160 ms of
//! 400 ms).

use std::thread;
use std::time::Duration;

use lock_core::Result;

use crate::testkit::negative::broken_lock::{BrokenLease, BrokenRedisLock};

/// The injected pause between the `GET` (and compare) and the `DEL` of a release.
pub const RELEASE_PAUSE: Duration = Duration::from_millis(600);

pub(crate) fn release(lock: &BrokenRedisLock, lease: BrokenLease) -> Result<bool> {
    let stored: Option<String> = lock.call(|c| redis::cmd("GET").arg(&lease.key).query(c))?;
    if stored.as_deref() != Some(lease.value.as_str()) {
        return Ok(false);
    }
    // The client is descheduled, or a GC pause hits, right here.
    thread::sleep(RELEASE_PAUSE);
    Ok(lock.call(|c| redis::cmd("DEL").arg(&lease.key).query::<i64>(c))? == 1)
}
