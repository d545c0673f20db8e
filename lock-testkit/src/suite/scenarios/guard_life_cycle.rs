//! S14 — the guard's life cycle (source 004): dropping the guard releases; an explicit unlock
//! returns the result; releasing twice is harmless; releasing after expiry reports "not held"; a
//! leaked guard's lock expires.

use std::thread;
use std::time::Duration;

use lock_core::{DistributedLock, Error, HoldKind, Lock};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, MS, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

const SHORT_LEASE: Duration = Duration::from_millis(500);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let (a, b) = (client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?);

    // Drop releases.
    let name = unique_name("s14-drop");
    drop(acquire(&Lock::new(&a, name.clone()))?);
    ensure!(Lock::new(&b, name).try_lock()?.is_some(), "dropping the guard did not release the lock");

    // Explicit unlock returns the result; releasing a reentrant lock twice (the nested hold, then
    // the outer one) is harmless: one server release, and the lock is free.
    let name = unique_name("s14-unlock");
    let lock = Lock::new(&a, name.clone());
    let outer = acquire(&lock)?;
    let inner = acquire(&lock)?;
    inner.unlock()?;
    ensure!(outer.unlock().is_ok(), "explicit unlock of a held lock failed");
    ensure!(lock.hold_count() == 0, "hold count {} after unlocking", lock.hold_count());
    let again = Lock::new(&b, name.clone()).try_lock()?;
    ensure!(again.is_some(), "the lock stayed held after unlock");
    drop(again);

    if target.backend()?.hold_kind() == HoldKind::Session {
        return Ok(Verdict::Pass); // No lease to run out: the rest is about expiry.
    }

    // Release after expiry reports "not held".
    let short = client(target, options(SHORT_LEASE, false))?;
    let name = unique_name("s14-expired");
    let guard = acquire(&Lock::new(&short, name))?;
    thread::sleep(SHORT_LEASE + 300 * MS);
    let released = guard.unlock();
    ensure!(matches!(released, Err(Error::NotHeld { .. })), "unlock after expiry returned {released:?}");

    // A leaked guard's lock expires — with renewal off. (With renewal on, a leaked guard is renewed
    // as long as its process lives, like Redisson's watchdog: LockGuard's docs say so.)
    let name = unique_name("s14-leaked");
    std::mem::forget(acquire(&Lock::new(&short, name.clone()))?);
    let taken = Lock::new(&b, name).try_lock_for(SHORT_LEASE + 2 * SECOND)?;
    ensure!(taken.is_some(), "a leaked guard's lock never expired");
    Ok(Verdict::Pass)
}
