//! SEM01 — never more than N holders: a semaphore of [`PERMITS`] is first held by that many
//! clients at once (a further one is refused); then [`THREADS`] threads in each of two processes
//! (this one and a child, where the backend reaches across processes) take permits
//! [`ROUNDS`] times each. Inside, every holder leaves a file in a shared directory and counts the
//! files there: a count above N is an over-admission.

use lock_core::Semaphore;

use crate::suite::child::{contend, serve_if_child, Holder, Role};
use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{acquire_within, client, options, unique_name, ACQUIRE_BOUND, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const PERMITS: u32 = 3;
const THREADS: usize = 8;
const ROUNDS: usize = 20;

pub(crate) fn run<T: SuiteTarget>(target: &T, test_name: &str) -> ScenarioResult {
    serve_if_child(target);
    needs!(target, "permits");
    let name = unique_name("sem01");

    // N at once, not one (a semaphore, not a mutex), and not N + 1.
    let clients: Vec<_> =
        (0..=PERMITS).map(|_| client(target, options(10 * SECOND, true))).collect::<Result<_, _>>()?;
    let mut permits = Vec::new();
    for client in &clients[..PERMITS as usize] {
        let semaphore = Semaphore::new(client, name.clone(), PERMITS)?;
        permits.push(acquire_within(semaphore.try_acquire_for(ACQUIRE_BOUND), &name)?);
    }
    let last = Semaphore::new(&clients[PERMITS as usize], name.clone(), PERMITS)?;
    ensure!(last.try_acquire()?.is_none(), "a permit beyond the {PERMITS} held was granted");
    drop(permits);

    // Contention across two processes.
    let dir = tempfile::Builder::new()
        .prefix("distlock-sem01-")
        .tempdir()
        .map_err(|e| Failure(format!("cannot make the holders' directory: {e}")))?;
    let path = dir.path().to_string_lossy().into_owned();
    let child = match target.child_env() {
        Ok(env) => {
            let role = Role::Contend {
                name: name.clone(),
                permits: PERMITS,
                threads: THREADS,
                rounds: ROUNDS,
                dir: path,
            };
            Some(Holder::start(test_name, &env, &role)?)
        }
        // In-process backends: the threads of this process alone.
        Err(_) => None,
    };
    let (overlaps, done) = contend(&clients[0], &name, PERMITS, THREADS, ROUNDS, dir.path())?;
    let (child_overlaps, child_done) = match &child {
        Some(child) => child.contention_result(4 * ACQUIRE_BOUND)?,
        None => (0, THREADS * ROUNDS),
    };
    ensure!(
        overlaps + child_overlaps == 0,
        "more than {PERMITS} holders were inside at once {} times",
        overlaps + child_overlaps
    );
    ensure!(
        done == THREADS * ROUNDS && child_done == THREADS * ROUNDS,
        "rounds done: {done} here, {child_done} in the child"
    );
    Ok(Verdict::Pass)
}
