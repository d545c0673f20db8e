//! RW02 — a writer is not starved: four readers (two threads of each of two clients) keep the
//! read lock held without a gap, each re-taking it as soon as it lets go; a writer that starts
//! waiting must get the lock within [`WRITER_BOUND`], because new readers queue behind a waiting
//! writer. Prints the writer's measured wait.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::ReadWriteLock;

use crate::poll::eventually;
use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{acquire_within, client, options, unique_name, ACQUIRE_BOUND, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

/// How long a writer may wait behind the stream: far past the readers' hold time, far short of
/// forever.
const WRITER_BOUND: Duration = Duration::from_secs(10);
/// How long each reader holds the read lock each time.
const READ_HOLD: Duration = Duration::from_millis(40);

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    needs!(target, "read_write");
    let name = unique_name("rw02");
    let clients = [client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?];
    let writer = client(target, options(10 * SECOND, true))?;
    let writer_lock = ReadWriteLock::new(&writer, name.clone());
    let stop = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    let (waited, got) = thread::scope(|s| -> Result<(Duration, bool), Failure> {
        let readers: Vec<_> = clients
            .iter()
            .flat_map(|client| std::iter::repeat_n(client, 2))
            .enumerate()
            .map(|(index, client)| {
                let (lock, stop, reads) = (ReadWriteLock::new(client, name.clone()), &stop, &reads);
                s.spawn(move || -> Result<(), Failure> {
                    // Staggered, so that the holds overlap and the lock is never free.
                    thread::sleep(READ_HOLD / 4 * index as u32);
                    while !stop.load(Ordering::SeqCst) {
                        let guard = acquire_within(lock.try_read_for(ACQUIRE_BOUND), lock.name())?;
                        reads.fetch_add(1, Ordering::SeqCst);
                        thread::sleep(READ_HOLD);
                        guard.unlock()?;
                    }
                    Ok(())
                })
            })
            .collect();
        // The stream is on: reads complete and the lock is taken.
        let streaming = eventually(ACQUIRE_BOUND, || reads.load(Ordering::SeqCst) >= 8);
        let busy = streaming && writer_lock.try_write()?.is_none();
        let started = Instant::now();
        let guard = if busy { writer_lock.try_write_for(WRITER_BOUND)? } else { None };
        let waited = started.elapsed();
        let got = guard.is_some();
        drop(guard);
        stop.store(true, Ordering::SeqCst);
        for reader in readers {
            reader.join().map_err(|_| Failure("a reader panicked".into()))??;
        }
        ensure!(streaming, "the readers never got going");
        ensure!(busy, "the lock was free between reads: the stream did not keep it held");
        Ok((waited, got))
    })?;
    ensure!(got, "the writer was starved: no write lock within {WRITER_BOUND:?} of continuous reads");
    println!("RW02: the writer got the lock {waited:?} after it started waiting behind the readers");
    Ok(Verdict::Pass)
}
