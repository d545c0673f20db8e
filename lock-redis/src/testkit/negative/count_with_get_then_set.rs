//! N07 — a semaphore that counts its holders with `GET`, a compare in the client, then `SET`
//! (the check-then-act style the docs warn about for release, here for a count): two clients
//! read the same count between one's `GET` and its `SET`, both see a free permit, and both take
//! it. The mutex side of the recipe is the correct `SET NX PX` (it passes S02).
//!
//! The window is widened by [`COUNT_PAUSE`] between the `GET` and the `SET`, as a descheduled
//! client or a slow network would.

use std::thread;
use std::time::Duration;

use lock_core::{LockName, Result};

use crate::testkit::negative::broken_lock::{millis, BrokenLease, BrokenRedisLock};
use crate::testkit::negative::Recipe;

/// The injected pause between reading the count and writing it back.
pub const COUNT_PAUSE: Duration = Duration::from_millis(5);

/// Takes a permit if the count read is below `permits`; the flaw: read and write are two commands.
pub(crate) fn acquire(
    lock: &BrokenRedisLock,
    name: &LockName,
    permits: u32,
    ttl: Duration,
) -> Result<Option<BrokenLease>> {
    let key = format!("{}:count", BrokenRedisLock::key(Recipe::N07CountWithGetThenSet, name));
    let count: Option<i64> = lock.call(|c| redis::cmd("GET").arg(&key).query(c))?;
    // Over-admitted permits counted down below zero read as none held.
    let count = count.unwrap_or(0).max(0);
    if count >= i64::from(permits) {
        return Ok(None);
    }
    thread::sleep(COUNT_PAUSE);
    lock.call(|c| redis::cmd("SET").arg(&key).arg(count + 1).arg("PX").arg(millis(ttl)).query::<()>(c))?;
    Ok(Some(BrokenLease { key, value: String::new(), permit: true }))
}

/// Keeps the count alive.
pub(crate) fn extend(lock: &BrokenRedisLock, lease: &BrokenLease, ttl: Duration) -> Result<bool> {
    Ok(lock.call(|c| redis::cmd("PEXPIRE").arg(&lease.key).arg(millis(ttl)).query::<i64>(c))? == 1)
}

/// Gives the permit back by counting down.
pub(crate) fn release(lock: &BrokenRedisLock, lease: BrokenLease) -> Result<bool> {
    lock.call(|c| redis::cmd("DECR").arg(&lease.key).query::<i64>(c))?;
    Ok(true)
}
