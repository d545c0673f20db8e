//! SEM02 — a killed holder's permit returns: of a semaphore's two permits, a child process holds
//! one and this process the other, so a third is refused; the child is killed with SIGKILL, and
//! its permit must come back within the crash bound of S04 (the permit's lease, or its session).

use lock_core::Semaphore;

use crate::suite::child::{serve_if_child, Holder, Role, CHILD_LEASE};
use crate::suite::outcome::{applicable, ensure, needs};
use crate::suite::support::{acquire_within, client, options, unique_name, ACQUIRE_BOUND, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

const PERMITS: u32 = 2;

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    serve_if_child(target);
    needs!(target, "permits");
    let env = applicable!(target.child_env());
    let name = unique_name("sem02");
    let mut holder = Holder::start(test_name, &env, &Role::Permit { name: name.clone(), permits: PERMITS })?;
    let survivor = client(target, options(10 * SECOND, true))?;
    let semaphore = Semaphore::new(&survivor, name.clone(), PERMITS)?;
    let mine = acquire_within(semaphore.try_acquire_for(ACQUIRE_BOUND), &name)?;
    ensure!(semaphore.try_acquire()?.is_none(), "a third permit of two was granted while a process held one");

    let bound = target.free_after_crash_within(CHILD_LEASE);
    let _returned = holder
        .kill_and_take("the killed holder's permit", bound, |timeout| semaphore.try_acquire_for(timeout))?;
    drop(mine);
    Ok(Verdict::Pass)
}
