//! S08 — lease renewal, the watchdog (sources 001, 004): lease 1 s, critical section 3 s. With
//! renewal on, no one else acquires during the 3 s; with renewal off, another client acquires after
//! about a second and the first holder is told its lock was lost.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, HoldKind, Lock};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, MS, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_secs(1);
const CRITICAL_SECTION: Duration = Duration::from_secs(3);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let rival_client = client(target, options(10 * SECOND, true))?;

    // Renewal on: the lock outlives its lease as long as the holder works.
    let name = unique_name("s08-on");
    let holder = client(target, options(LEASE, true))?;
    let guard = acquire(&Lock::new(&holder, name.clone()))?;
    let rival = Lock::new(&rival_client, name);
    let started = Instant::now();
    while started.elapsed() < CRITICAL_SECTION {
        ensure!(
            rival.try_lock()?.is_none(),
            "another client acquired a renewed lock after {:?}",
            started.elapsed()
        );
        thread::sleep(100 * MS);
    }
    ensure!(guard.is_held(), "the renewed lock is no longer believed held");
    guard.unlock()?;

    if target.backend()?.hold_kind() == HoldKind::Session {
        // Holds bound to a session do not expire while the session lives; nothing more to show.
        return Ok(Verdict::Pass);
    }

    // Renewal off: the lease runs out under the working holder, and the holder is told.
    let name = unique_name("s08-off");
    let holder = client(target, options(LEASE, false))?;
    let guard = acquire(&Lock::new(&holder, name.clone()))?;
    let lost = guard.lost_signal();
    let rival = Lock::new(&rival_client, name);
    let started = Instant::now();
    let taken = rival.try_lock_for(CRITICAL_SECTION)?;
    let after = started.elapsed();
    ensure!(taken.is_some(), "without renewal, no one could acquire within {CRITICAL_SECTION:?}");
    ensure!(after >= LEASE / 2, "without renewal, another client acquired after only {after:?}");
    ensure!(after <= LEASE + SECOND, "without renewal, the lease of {LEASE:?} lasted {after:?}");
    ensure!(lost.wait_timeout(SECOND), "the first holder was not told its lock was lost");
    ensure!(!guard.is_held(), "the first holder still believes it holds the lock");
    let released = guard.unlock();
    ensure!(
        matches!(released, Err(Error::NotHeld { .. })),
        "the expired holder's unlock returned {released:?}"
    );
    Ok(Verdict::Pass)
}
