//! S10 — the lock is lost underneath its holder (source 003): the key or row is deleted, or the
//! session or connection killed. The holder learns it (lost signal, guard state, unlock error)
//! within one renewal interval.

use std::time::Duration;

use lock_core::{Lock, LockOptions};

use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::{acquire, client, unique_name, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

const LEASE: Duration = Duration::from_secs(3);
const RENEW_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s10");
    let options = LockOptions::builder().lease(LEASE).renew_interval(RENEW_INTERVAL).build()?;
    let holder = client(target, options)?;
    let guard = acquire(&Lock::new(&holder, name.clone()))?;
    applicable!(target.break_lock(&name))?;
    // One interval until the next renewal, plus slack for the renewal's own round trip.
    ensure!(
        guard.lost_signal().wait_timeout(RENEW_INTERVAL + SECOND),
        "the holder was not told within one renewal interval that its lock was taken away"
    );
    ensure!(!guard.is_held(), "the guard still claims the lock after it was lost");
    ensure!(guard.unlock().is_err(), "unlocking a lost lock reported success");
    Ok(Verdict::Pass)
}
