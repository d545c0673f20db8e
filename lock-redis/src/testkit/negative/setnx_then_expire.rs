//! N01 — `SETNX` then `EXPIRE`, two commands (sources 000, 001):
//!
//! ```text
//! > setnx lock:codehole true
//! > expire lock:codehole 5
//! ... do something critical ...
//! > del lock:codehole
//! ```
//!
//! If the client dies between the two commands, the key never gets an expiry: an immortal lock.
//! The crash is injected with
//! [`inject_crash_mid_acquire`](lock_testkit::suite::SuiteTarget::inject_crash_mid_acquire).
//! (`PEXPIRE` stands in for `EXPIRE` so the suite's sub-second leases keep their length; the flaw
//! is the same.)

use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::{Error, Result};

use crate::testkit::negative::broken_lock::{millis, BrokenLease, BrokenRedisLock};

pub(crate) fn acquire(lock: &BrokenRedisLock, key: String, ttl: Duration) -> Result<Option<BrokenLease>> {
    let set: bool = lock.call(|c| redis::cmd("SETNX").arg(&key).arg("true").query(c))?;
    if !set {
        return Ok(None);
    }
    if lock.crash.swap(false, Ordering::SeqCst) {
        // The process "dies" here: the EXPIRE below is never sent.
        return Err(Error::backend("redis (broken recipe)", "injected crash between SETNX and EXPIRE"));
    }
    lock.call(|c| redis::cmd("PEXPIRE").arg(&key).arg(millis(ttl)).query::<i64>(c))?;
    Ok(Some(BrokenLease { key, value: "true".into(), permit: false }))
}

/// `EXPIRE` again, for whoever holds it: the value says nothing about the holder.
pub(crate) fn extend(lock: &BrokenRedisLock, lease: &BrokenLease, ttl: Duration) -> Result<bool> {
    Ok(lock.call(|c| redis::cmd("PEXPIRE").arg(&lease.key).arg(millis(ttl)).query::<i64>(c))? == 1)
}

pub(crate) fn release(lock: &BrokenRedisLock, lease: BrokenLease) -> Result<bool> {
    Ok(lock.call(|c| redis::cmd("DEL").arg(&lease.key).query::<i64>(c))? == 1)
}
