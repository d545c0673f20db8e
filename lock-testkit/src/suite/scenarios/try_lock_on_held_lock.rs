//! S02 — try-lock on a held lock (source 000): "not acquired" (not an error) at once; succeeds
//! after release.

use std::thread;
use std::time::Instant;

use lock_core::Lock;

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s02");
    let (a, b) = (client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?);
    let held = acquire(&Lock::new(&a, name.clone()))?;
    let contender = Lock::new(&b, name);
    // From another thread too, so per-thread reentrancy cannot hide a missing server check.
    let (attempt, took) = thread::scope(|s| {
        s.spawn(|| {
            let started = Instant::now();
            (contender.try_lock().map(|guard| guard.is_some()), started.elapsed())
        })
        .join()
        .expect("try_lock thread")
    });
    ensure!(!attempt?, "try_lock acquired a lock someone else holds");
    ensure!(took < 2 * SECOND, "try_lock on a held lock took {took:?}: it must not wait");
    held.unlock()?;
    ensure!(contender.try_lock()?.is_some(), "try_lock failed on a released lock");
    Ok(Verdict::Pass)
}
