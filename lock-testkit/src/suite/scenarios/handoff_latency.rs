//! S11 — hand-off latency (seed 003: "no wake-up mechanism"): a thread blocked in `lock()` while
//! another releases acquires within a few round trips, woken by the server, not by a sleep.
//!
//! A backend offers waiting through [`NativeWait`](lock_core::NativeWait), whose contract bounds
//! its fallback re-check to about once a second; a backend without it is n/a (its waiters back
//! off). So a hand-off well under a second can only come from a server wake-up, and a median
//! over 400 ms means the wake-up did not happen.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Lock};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, MS, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

/// Far below the ~1 s fallback re-check, far above a loopback round trip.
const WAKE_BOUND: Duration = Duration::from_millis(400);
const ROUNDS: usize = 3;

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    if target.backend()?.native_wait().is_none() {
        return Ok(Verdict::NotApplicable(
            "the backend has no server wake-ups; waiters back off between attempts".into(),
        ));
    }
    let holder = client(target, options(10 * SECOND, true))?;
    let waiter = client(target, options(10 * SECOND, true))?;
    let mut handoffs = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let name = unique_name("s11");
        let held = acquire(&Lock::new(&holder, name.clone()))?;
        let handoff = thread::scope(|s| -> Result<Duration, Failure> {
            let (ready_tx, ready) = mpsc::channel();
            let (waiter, name) = (&waiter, &name);
            let waiting = s.spawn(move || -> Result<Instant, Failure> {
                let lock = Lock::new(waiter, name.clone());
                let _ = ready_tx.send(());
                let guard = acquire(&lock)?;
                let acquired = Instant::now();
                guard.unlock()?;
                Ok(acquired)
            });
            let _ = ready.recv();
            thread::sleep(200 * MS); // let the waiter block
            let released = Instant::now();
            held.unlock()?;
            let acquired = waiting.join().map_err(|_| Failure("waiter panicked".into()))??;
            ensure!(acquired >= released, "the waiter acquired the lock before its holder released it");
            Ok(acquired - released)
        })?;
        handoffs.push(handoff);
    }
    handoffs.sort();
    let median = handoffs[ROUNDS / 2];
    ensure!(
        median < WAKE_BOUND,
        "median hand-off {median:?} (all: {handoffs:?}): the waiter was not woken by the server"
    );
    Ok(Verdict::Pass)
}
