//! S03 — timed wait (source 003): `try_lock_for(200ms)` on a held lock gives up after at least
//! 200 ms and not much later; a waiter gets the lock soon after the release.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::Lock;

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, MS, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const WAIT: Duration = Duration::from_millis(200);
/// Generous: the check is that the wait is bounded, not how fast the machine is.
const SLACK: Duration = Duration::from_millis(800);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s03");
    let (a, b) = (client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?);
    let held = acquire(&Lock::new(&a, name.clone()))?;
    let waiter = Lock::new(&b, name);

    let started = Instant::now();
    let attempt = waiter.try_lock_for(WAIT)?;
    let waited = started.elapsed();
    ensure!(attempt.is_none(), "try_lock_for acquired a held lock");
    ensure!(waited >= WAIT, "try_lock_for gave up after {waited:?}, before its {WAIT:?}");
    ensure!(waited < WAIT + SLACK, "try_lock_for gave up after {waited:?}, long after its {WAIT:?}");

    thread::scope(|s| -> ScenarioResult {
        let waiting = s.spawn(|| -> Result<Instant, Failure> {
            let guard = waiter.try_lock_for(10 * SECOND)?;
            ensure!(guard.is_some(), "the waiter timed out although the lock was released");
            Ok(Instant::now())
        });
        thread::sleep(100 * MS);
        held.unlock()?;
        let released = Instant::now();
        let acquired = waiting.join().map_err(|_| Failure("waiter panicked".into()))??;
        let after = acquired.saturating_duration_since(released);
        ensure!(after < 2 * SECOND, "the waiter got the lock {after:?} after its release");
        Ok(Verdict::Pass)
    })
}
