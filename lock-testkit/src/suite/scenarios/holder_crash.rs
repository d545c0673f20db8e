//! S04 — the holder crashes (sources 000, 003): a child process that holds the lock is killed with
//! SIGKILL; another client gets the lock within the lease plus a second (TTL backends), or as soon
//! as the server notices the dead session or connection.
//!
//! The child is this very test binary, re-run (see [`child`](crate::suite::child)).

use lock_core::Lock;

use crate::suite::child::{serve_if_child, Holder, Role, CHILD_LEASE};
use crate::suite::outcome::{applicable, ensure};
use crate::suite::support::{client, options, unique_name, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    serve_if_child(target);
    let env = applicable!(target.child_env());
    let name = unique_name("s04");
    let mut holder = Holder::start(test_name, &env, &Role::Mutex(name.clone()))?;
    let survivor = client(target, options(10 * SECOND, true))?;
    let lock = Lock::new(&survivor, name.clone());
    ensure!(lock.try_lock()?.is_none(), "the lock was free although the child process held it");

    let bound = target.free_after_crash_within(CHILD_LEASE);
    let _taken = holder.kill_and_take("the lock", bound, |timeout| lock.try_lock_for(timeout))?;
    Ok(Verdict::Pass)
}
