//! S11 — hand-off latency (seed 003: "no wake-up mechanism"): a thread blocked in `lock()` while
//! another releases acquires within a few round trips, woken by the server, not by a sleep.
//!
//! The waiter's client backs off for 2 s between attempts, so a backend that merely polls would
//! hand off in about a second; a server wake-up hands off in milliseconds.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Lock, LockOptions};

use crate::suite::outcome::ensure;
use crate::suite::support::{client, options, unique_name, MS, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const SLOW_BACKOFF: Duration = Duration::from_secs(2);
/// Far below what polling with `SLOW_BACKOFF` could achieve, far above a loopback round trip.
const WAKE_BOUND: Duration = Duration::from_millis(400);
const ROUNDS: usize = 3;

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    if target.backend()?.native_wait().is_none() {
        return Ok(Verdict::NotApplicable(
            "the backend has no server wake-ups; waiters back off between attempts".into(),
        ));
    }
    let holder = client(target, options(10 * SECOND, true))?;
    let waiter_options =
        LockOptions::builder().lease(10 * SECOND).backoff(SLOW_BACKOFF, SLOW_BACKOFF).build()?;
    let waiter = client(target, waiter_options)?;
    let mut handoffs = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let name = unique_name("s11");
        let held = Lock::new(&holder, name.clone()).lock()?;
        let handoff = thread::scope(|s| -> Result<Duration, Failure> {
            let (ready_tx, ready) = mpsc::channel();
            let (waiter, name) = (&waiter, &name);
            let waiting = s.spawn(move || -> Result<Instant, Failure> {
                let lock = Lock::new(waiter, name.clone());
                let _ = ready_tx.send(());
                let guard = lock.lock()?;
                let acquired = Instant::now();
                guard.unlock()?;
                Ok(acquired)
            });
            let _ = ready.recv();
            thread::sleep(200 * MS); // let the waiter block
            let released = Instant::now();
            held.unlock()?;
            let acquired = waiting.join().map_err(|_| Failure("waiter panicked".into()))??;
            Ok(acquired.saturating_duration_since(released))
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
