//! S05 — acquire and expiry are one atomic step (sources 000, 001, 003): right after acquiring,
//! the server already holds the lock with an expiry within (0, lease]; and a crash injected
//! between the steps of an acquisition cannot leave an immortal lock.

use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Lock, OwnerToken};

use crate::suite::breach::IMMORTAL_LOCK;
use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::{acquire, client, options, unique_name, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_secs(1);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    // 1. The expiry is there the moment the acquisition returns.
    let name = unique_name("s05");
    let holder = client(target, options(10 * SECOND, true))?;
    let guard = acquire(&Lock::new(&holder, name.clone()))?;
    let remaining = applicable!(target.remaining_lease(&name))?;
    ensure!(
        remaining.is_some_and(|left| !left.is_zero() && left <= 10 * SECOND),
        "right after acquiring, the server's lease is {remaining:?}, not within (0, 10s]"
    );
    guard.unlock()?;

    // 2. A holder that dies mid-acquisition (or right after, where acquisition is one step) must
    // not leave the lock held beyond its lease.
    let name = unique_name("s05-crash");
    let crashing = target.backend()?;
    let armed = target.inject_crash_mid_acquire();
    let attempt = crashing.try_acquire(&name, &OwnerToken::random(), LEASE);
    if !armed {
        // Nothing to crash between: the acquisition itself must have worked, or nothing is tested.
        ensure!(
            matches!(attempt, Ok(Some(_))),
            "acquiring a free lock failed: {:?}",
            attempt.as_ref().map(Option::is_some).map_err(ToString::to_string)
        );
    }
    // The "crash": the lease (if any) is abandoned without release or renewal.
    std::mem::forget(attempt);
    let label = if armed { "a crash between its steps" } else { "a crash right after acquiring" };
    let other = client(target, options(10 * SECOND, true))?;
    let started = Instant::now();
    let acquired = Lock::new(&other, name).try_lock_for(LEASE + 2 * SECOND)?;
    ensure!(
        acquired.is_some(),
        "after {label}, the lock was still held {:?} later: {IMMORTAL_LOCK}",
        started.elapsed()
    );
    Ok(Verdict::Pass)
}
