//! SEM03 — one count per name: while a client holds a permit of a 3-permit semaphore, a client
//! asking for the same name with 5 permits gets `PermitsMismatch` (never a sixth, silent
//! admission), from a try and from a wait; zero permits is `InvalidConfig`; once nothing is held,
//! the name may be used with another count. Renewal keeps a permit and a mutex of one client held
//! past their 1 s leases.

use std::time::Duration;

use lock_core::{Error, Lock, Semaphore};

use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{
    acquire, acquire_within, client, options, renewed_together, unique_name, ACQUIRE_BOUND, RENEWED_LEASE,
    SECOND,
};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    needs!(target, "permits");
    let name = unique_name("sem03");
    let first = client(target, options(10 * SECOND, true))?;
    let second = client(target, options(10 * SECOND, true))?;
    let three = Semaphore::new(&first, name.clone(), 3)?;
    let five = Semaphore::new(&second, name.clone(), 5)?;
    let zero = second.semaphore(name.as_str(), 0);
    ensure!(matches!(zero, Err(Error::InvalidConfig { .. })), "zero permits gave {zero:?}");

    let held = acquire_within(three.try_acquire_for(ACQUIRE_BOUND), &name)?;
    for (form, outcome) in [
        ("try_acquire", five.try_acquire()),
        ("try_acquire_for", five.try_acquire_for(Duration::from_millis(300))),
    ] {
        ensure!(
            matches!(outcome, Err(Error::PermitsMismatch { asked: 5, held_with: 3, .. })),
            "{form} with 5 permits while 3-permit holders exist returned {:?}",
            outcome.map(|guard| guard.is_some())
        );
    }
    held.unlock()?;

    let now_five = acquire_within(five.try_acquire_for(ACQUIRE_BOUND), &name)?;
    let outcome = three.try_acquire();
    ensure!(
        matches!(outcome, Err(Error::PermitsMismatch { asked: 3, held_with: 5, .. })),
        "once the count was 5, a 3-permit request returned {:?}",
        outcome.map(|guard| guard.is_some())
    );
    now_five.unlock()?;

    // Renewal keeps a permit and a mutex of one client held past their leases (one batch).
    let short = client(target, options(RENEWED_LEASE, true))?;
    let renewed = unique_name("sem03-renewed");
    let permit =
        acquire_within(Semaphore::new(&short, renewed.clone(), 1)?.try_acquire_for(ACQUIRE_BOUND), &renewed)?;
    let mutex = acquire(&Lock::new(&short, renewed.clone()))?;
    let rival = Semaphore::new(&second, renewed.clone(), 1)?;
    renewed_together(&[&permit, &mutex], || {
        Ok(if rival.try_acquire()?.is_some() {
            Some("the only permit".into())
        } else if Lock::new(&second, renewed.clone()).try_lock()?.is_some() {
            Some("a mutex".into())
        } else {
            None
        })
    })?;
    Ok(Verdict::Pass)
}
