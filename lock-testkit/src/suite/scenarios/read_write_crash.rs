//! RW04 — killed holders release their holds: a child process holding the read lock shares it
//! with this process and keeps writers out; killed with SIGKILL, a writer gets the lock within
//! the crash bound of S04. Then a child holding the write lock keeps readers out; killed, a
//! reader gets the lock within the same bound.

use lock_core::ReadWriteLock;

use crate::suite::child::{serve_if_child, Holder, Role, CHILD_LEASE};
use crate::suite::outcome::{applicable, ensure, needs};
use crate::suite::support::{client, options, unique_name, SECOND};
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    serve_if_child(target);
    needs!(target, "read_write");
    let env = applicable!(target.child_env());
    let survivor = client(target, options(10 * SECOND, true))?;
    let bound = target.free_after_crash_within(CHILD_LEASE);

    let name = unique_name("rw04-reader");
    let lock = ReadWriteLock::new(&survivor, name.clone());
    let mut reader = Holder::start(test_name, &env, &Role::Read(name.clone()))?;
    let shared = lock.try_read()?;
    ensure!(shared.is_some(), "a reader could not share the read lock with a reader process");
    drop(shared);
    ensure!(lock.try_write()?.is_none(), "a writer got the lock while a reader process held it");
    let write = reader
        .kill_and_take("the killed reader's read lock", bound, |timeout| lock.try_write_for(timeout))?;
    drop(write);

    let name = unique_name("rw04-writer");
    let lock = ReadWriteLock::new(&survivor, name.clone());
    let mut writer = Holder::start(test_name, &env, &Role::Write(name.clone()))?;
    ensure!(lock.try_read()?.is_none(), "a reader got the lock while a writer process held it");
    let _read = writer
        .kill_and_take("the killed writer's write lock", bound, |timeout| lock.try_read_for(timeout))?;
    Ok(Verdict::Pass)
}
