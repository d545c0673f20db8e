//! S01 — mutual exclusion under contention (sources 003, 001).
//!
//! 8 threads, each with its own client, loop {lock; non-atomic read-modify-write of a shared
//! counter with a short sleep between read and write; unlock}. Passes when no update is lost and
//! no two holders ever overlap.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, MS, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const THREADS: usize = 8;
const ROUNDS: usize = 15;

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let name = unique_name("s01");
    let counter = AtomicU64::new(0);
    let holders = AtomicUsize::new(0);
    let most_holders = AtomicUsize::new(0);
    let clients =
        (0..THREADS).map(|_| client(target, options(10 * SECOND, true))).collect::<Result<Vec<_>, _>>()?;
    thread::scope(|s| -> Result<(), Failure> {
        let workers: Vec<_> = clients
            .iter()
            .map(|client| {
                let lock = lock_core::Lock::new(client, name.clone());
                let (counter, holders, most_holders) = (&counter, &holders, &most_holders);
                s.spawn(move || -> Result<(), Failure> {
                    for _ in 0..ROUNDS {
                        let guard = acquire(&lock)?;
                        let inside = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most_holders.fetch_max(inside, Ordering::SeqCst);
                        // The unsafe read-modify-write the lock must protect.
                        let read = counter.load(Ordering::SeqCst);
                        thread::sleep(MS);
                        counter.store(read + 1, Ordering::SeqCst);
                        holders.fetch_sub(1, Ordering::SeqCst);
                        guard.unlock()?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| Failure("a worker panicked".into()))??;
        }
        Ok(())
    })?;
    let expected = (THREADS * ROUNDS) as u64;
    let counted = counter.load(Ordering::SeqCst);
    ensure!(counted == expected, "counter is {counted} after {expected} acquisitions: updates were lost");
    let most = most_holders.load(Ordering::SeqCst);
    ensure!(most == 1, "{most} holders were inside the lock at once");
    Ok(Verdict::Pass)
}
