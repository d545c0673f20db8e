//! N03 — every holder writes the same value `1`, and release is a proper compare-and-delete
//! script (source 004's orders a/b/c story). The compare is atomic but useless: every holder's
//! value is `1`, so a holder whose lease ran out deletes the next holder's lock.

use std::time::Duration;

use lock_core::Result;

use crate::testkit::negative::broken_lock::set_nx_px;
use crate::testkit::negative::broken_lock::{BrokenLease, BrokenRedisLock};

/// The docs' compare-and-delete script (it is the value that is wrong, not the script).
const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

pub(crate) fn acquire(lock: &BrokenRedisLock, key: String, ttl: Duration) -> Result<Option<BrokenLease>> {
    set_nx_px(lock, key, "1".into(), ttl)
}

pub(crate) fn release(lock: &BrokenRedisLock, lease: BrokenLease) -> Result<bool> {
    let deleted: i64 = lock.call(|c| {
        redis::cmd("EVAL").arg(COMPARE_AND_DELETE).arg(1).arg(&lease.key).arg(&lease.value).query(c)
    })?;
    Ok(deleted == 1)
}
