//! N02 — `DEL` without checking the owner (sources 000, 001): the acquisition is the correct
//! `SET key token NX PX`, but release is a plain `DEL`. A holder whose lease ran out (a long GC
//! pause) deletes the lock the next holder has taken meanwhile, and believes it released its own.

use std::time::Duration;

use lock_core::Result;

use crate::testkit::negative::broken_lock::{millis, BrokenLease, BrokenRedisLock};

/// Compare the stored value, then `PEXPIRE`, in one script (extending is not the flaw).
const EXTEND: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                      return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

pub(crate) fn extend(lock: &BrokenRedisLock, lease: &BrokenLease, ttl: Duration) -> Result<bool> {
    let extended: i64 = lock.call(|c| {
        redis::cmd("EVAL").arg(EXTEND).arg(1).arg(&lease.key).arg(&lease.value).arg(millis(ttl)).query(c)
    })?;
    Ok(extended == 1)
}

/// The flaw: deletes whatever is there.
pub(crate) fn release(lock: &BrokenRedisLock, lease: BrokenLease) -> Result<bool> {
    Ok(lock.call(|c| redis::cmd("DEL").arg(&lease.key).query::<i64>(c))? == 1)
}
