//! S06 — owner-safe release (sources 002, 003, 004): A's lease expires, B acquires, A (resumed)
//! releases. B must still hold the lock (C cannot acquire) and A must be told it no longer held it.
//!
//! Two orderings, because the docs' broken recipes fail in different ones:
//! 1. A releases after B has acquired (catches DEL without an owner check, and every holder
//!    writing the same value);
//! 2. A starts releasing while it still holds, and its lease runs out during the release (catches
//!    GET-compare-DEL as separate commands with a pause between them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use lock_core::{DistributedLock, Error, HoldKind, Lock};

use crate::suite::breach::RELEASED_ANOTHERS_LOCK;
use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, MS, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_millis(400);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    if target.backend()?.hold_kind() == HoldKind::Session {
        return Ok(Verdict::NotApplicable(
            "holds are bound to a live session or connection and never expire under a live holder".into(),
        ));
    }
    release_after_takeover(target)?;
    lease_runs_out_during_release(target)
}

fn release_after_takeover<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s06a");
    let (a, b, c) = (
        client(target, options(LEASE, false))?,
        client(target, options(10 * SECOND, true))?,
        client(target, options(10 * SECOND, true))?,
    );
    let stale = acquire(&Lock::new(&a, name.clone()))?;
    thread::sleep(LEASE + 300 * MS); // A "pauses" past its lease.
    let lock_b = Lock::new(&b, name.clone());
    let held_b = lock_b.try_lock_for(2 * SECOND)?;
    ensure!(held_b.is_some(), "B could not acquire after A's lease ran out");
    let released = stale.unlock();
    // Safety first: the breach the broken recipes are written to commit.
    ensure!(
        Lock::new(&c, name).try_lock()?.is_none(),
        "after A's late release, C acquired the lock B holds: A {RELEASED_ANOTHERS_LOCK}"
    );
    ensure!(
        matches!(released, Err(Error::NotHeld { .. })),
        "A's late release returned {released:?} instead of telling A it no longer held the lock"
    );
    Ok(Verdict::Pass)
}

fn lease_runs_out_during_release<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s06b");
    let (a, c) = (client(target, options(LEASE, false))?, client(target, options(10 * SECOND, true))?);
    let stale = acquire(&Lock::new(&a, name.clone()))?;
    let stop = AtomicBool::new(false);
    thread::scope(|s| -> ScenarioResult {
        // B keeps trying to take the lock and, once it has it, holds it until told to stop.
        let (acquired_tx, acquired) = mpsc::channel();
        let (stop, name) = (&stop, &name);
        let contender = s.spawn(move || -> Result<(), Failure> {
            let b = client(target, options(10 * SECOND, true))?;
            let lock = Lock::new(&b, name.clone());
            while !stop.load(Ordering::SeqCst) {
                match lock.try_lock() {
                    Ok(Some(guard)) => {
                        let _ = acquired_tx.send(Ok(()));
                        while !stop.load(Ordering::SeqCst) {
                            thread::sleep(5 * MS);
                        }
                        drop(guard);
                        return Ok(());
                    }
                    Ok(None) => thread::sleep(5 * MS),
                    Err(error) => {
                        // Report it where the verdict is made, not as "B never acquired".
                        let _ = acquired_tx.send(Err(Failure::from(error)));
                        return Ok(());
                    }
                }
            }
            Ok(())
        });
        thread::sleep(LEASE * 6 / 10); // A starts releasing with 40 % of its lease left.
        let _ = stale.unlock(); // Either answer is honest here: it may have expired meanwhile.
        let outcome = match acquired.recv_timeout(LEASE + 2 * SECOND) {
            Err(_) => Err(Failure("B never acquired the lock A released".into())),
            Ok(Err(failure)) => Err(Failure(format!("B's attempts failed: {failure}"))),
            Ok(Ok(())) => match Lock::new(&c, name.clone()).try_lock() {
                Ok(Some(_)) => {
                    Err(Failure(format!("C acquired the lock while B held it: A {RELEASED_ANOTHERS_LOCK}")))
                }
                Ok(None) => Ok(Verdict::Pass),
                Err(error) => Err(error.into()),
            },
        };
        stop.store(true, Ordering::SeqCst);
        contender.join().map_err(|_| Failure("contender panicked".into()))??;
        outcome
    })
}
