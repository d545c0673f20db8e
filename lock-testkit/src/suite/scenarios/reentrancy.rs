//! S07 — reentrancy, Java `ReentrantLock` style (sources 000, 001, 004): the same thread locks
//! twice (hold count 2); other threads stay blocked until the second unlock; another thread cannot
//! unlock it (guards are `!Send`, enforced at compile time; at run time it holds nothing).

use std::thread;

use lock_core::Lock;

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s07");
    let (owner, other) =
        (client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?);
    let lock = Lock::new(&owner, name.clone());
    let rival = Lock::new(&other, name);
    let outer = acquire(&lock)?;
    let inner = acquire(&lock)?;
    ensure!(lock.hold_count() == 2, "hold count is {} after locking twice", lock.hold_count());
    ensure!(outer.fencing_token() == inner.fencing_token(), "reentry must not be a new acquisition");

    // Another thread, same client: holds nothing and cannot get in.
    let same_client_other_thread = thread::scope(|s| {
        s.spawn(|| -> Result<(usize, bool, bool), Failure> {
            Ok((lock.hold_count(), lock.is_held_by_current_thread(), lock.try_lock()?.is_some()))
        })
        .join()
        .map_err(|_| Failure("thread panicked".into()))
    })??;
    ensure!(
        same_client_other_thread == (0, false, false),
        "another thread of the owning client saw (hold count, held, acquired) = {same_client_other_thread:?}"
    );
    ensure!(rival.try_lock()?.is_none(), "another client acquired a lock held twice");

    inner.unlock()?;
    ensure!(lock.hold_count() == 1, "hold count is {} after one unlock", lock.hold_count());
    ensure!(rival.try_lock()?.is_none(), "another client acquired the lock after only one of two unlocks");
    outer.unlock()?;
    ensure!(lock.hold_count() == 0, "hold count is {} after both unlocks", lock.hold_count());
    ensure!(rival.try_lock()?.is_some(), "the lock stayed held after both unlocks");
    Ok(Verdict::Pass)
}
