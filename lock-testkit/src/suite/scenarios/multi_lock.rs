//! ML01 — multi-locks (Redisson's `RedissonMultiLock`, Curator's `InterProcessMultiLock`): two
//! threads, each with its own client, lock {a, b} and {b, a} [`ROUNDS`] times each, checking in
//! the critical section that they are never both inside. Passes when no round waits past
//! [`ACQUIRE_BOUND`] (a deadlock would), and when a multi-lock that cannot get one of its locks
//! in time gives back the other (all or nothing), then gets both once they are free.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use lock_core::{Lock, MultiLock};

use crate::suite::outcome::ensure;
use crate::suite::support::{acquire, client, options, unique_name, ACQUIRE_BOUND, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

/// Multi-lock acquisitions per thread.
const ROUNDS: usize = 1_000;

/// How long the all-or-nothing check waits for a lock another client holds.
const SHORT_WAIT: Duration = Duration::from_millis(300);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let (a, b) = (unique_name("ml01-a"), unique_name("ml01-b"));
    let clients = [client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?];
    let inside = AtomicBool::new(false);
    let overlaps = AtomicUsize::new(0);
    let rounds = AtomicUsize::new(0);
    thread::scope(|s| -> Result<(), Failure> {
        let workers: Vec<_> = clients
            .iter()
            .zip([[a.clone(), b.clone()], [b.clone(), a.clone()]])
            .map(|(client, order)| {
                let (inside, overlaps, rounds) = (&inside, &overlaps, &rounds);
                s.spawn(move || -> Result<(), Failure> {
                    let multi = MultiLock::new(client, order)?;
                    for _ in 0..ROUNDS {
                        let guard = multi.try_lock_for(ACQUIRE_BOUND)?.ok_or_else(|| {
                            Failure(format!("a multi-lock waited {ACQUIRE_BOUND:?} in vain: a deadlock?"))
                        })?;
                        if inside.swap(true, Ordering::SeqCst) {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        inside.store(false, Ordering::SeqCst);
                        rounds.fetch_add(1, Ordering::SeqCst);
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
    let done = rounds.load(Ordering::SeqCst);
    ensure!(done == 2 * ROUNDS, "{done} of {} multi-lock rounds completed", 2 * ROUNDS);
    let overlapping = overlaps.load(Ordering::SeqCst);
    ensure!(overlapping == 0, "both multi-locks were held at once {overlapping} times");

    // All or nothing: with b held elsewhere, {a, b} times out holding neither.
    let [holder, taker] = &clients;
    let held_b = acquire(&Lock::new(holder, b.clone()))?;
    let multi = MultiLock::new(taker, [a.clone(), b.clone()])?;
    ensure!(multi.try_lock_for(SHORT_WAIT)?.is_none(), "the multi-lock got b while another client held it");
    let a_free = Lock::new(holder, a.clone()).try_lock()?;
    ensure!(a_free.is_some(), "a multi-lock that timed out kept a");
    drop(a_free);
    held_b.unlock()?;
    let both = multi.try_lock_for(ACQUIRE_BOUND)?;
    ensure!(both.is_some(), "the multi-lock did not get both locks once they were free");
    Ok(Verdict::Pass)
}
