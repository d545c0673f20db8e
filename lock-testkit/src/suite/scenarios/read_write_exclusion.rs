//! RW01 — readers share, a writer excludes: eight readers (four threads of each of two clients)
//! hold the read lock at once while a writer is refused; then a writer holds it alone; then
//! threads of two clients mix reads and writes, checking in each critical section that no writer
//! is inside with anyone else.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use lock_core::{LockClient, ReadWriteLock};

use crate::poll::eventually;
use crate::suite::outcome::{ensure, needs};
use crate::suite::support::{acquire_within, client, options, unique_name, ACQUIRE_BOUND, SECOND};
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

const READERS_PER_CLIENT: usize = 4;
/// Mixed rounds per thread, three threads per client.
const ROUNDS: usize = 30;

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    needs!(target, "read_write");
    let name = unique_name("rw01");
    let clients = [client(target, options(10 * SECOND, true))?, client(target, options(10 * SECOND, true))?];
    let writer = client(target, options(10 * SECOND, true))?;
    let writer_lock = ReadWriteLock::new(&writer, name.clone());

    // Eight readers at once; a writer is refused meanwhile.
    let holding = AtomicUsize::new(0);
    let release = AtomicBool::new(false);
    let refused = thread::scope(|s| -> Result<Result<(), String>, Failure> {
        let readers: Vec<_> = clients
            .iter()
            .flat_map(|client| std::iter::repeat_n(client, READERS_PER_CLIENT))
            .map(|client| {
                let (lock, holding, release) = (ReadWriteLock::new(client, name.clone()), &holding, &release);
                s.spawn(move || -> Result<(), Failure> {
                    let guard = acquire_within(lock.try_read_for(ACQUIRE_BOUND), lock.name())?;
                    holding.fetch_add(1, Ordering::SeqCst);
                    eventually(ACQUIRE_BOUND, || release.load(Ordering::SeqCst));
                    guard.unlock()?;
                    Ok(())
                })
            })
            .collect();
        let all = 2 * READERS_PER_CLIENT;
        let together = eventually(ACQUIRE_BOUND, || holding.load(Ordering::SeqCst) == all);
        let verdict = if !together {
            Err(format!(
                "only {} of {all} readers held the read lock at once",
                holding.load(Ordering::SeqCst)
            ))
        } else if writer_lock.try_write()?.is_some() {
            Err("a writer got the lock while eight readers held it".to_owned())
        } else if writer_lock.try_write_for(Duration::from_millis(300))?.is_some() {
            Err("a waiting writer got the lock while eight readers held it".to_owned())
        } else {
            Ok(())
        };
        release.store(true, Ordering::SeqCst);
        for reader in readers {
            reader.join().map_err(|_| Failure("a reader panicked".into()))??;
        }
        Ok(verdict)
    })?;
    refused.map_err(Failure)?;

    // A writer alone excludes readers and writers of other clients.
    let write = acquire_within(writer_lock.try_write_for(ACQUIRE_BOUND), &name)?;
    let other = ReadWriteLock::new(&clients[0], name.clone());
    ensure!(other.try_read()?.is_none(), "a reader got the lock while a writer held it");
    ensure!(other.try_write()?.is_none(), "a second writer got the lock while a writer held it");
    write.unlock()?;

    mixed(&clients, &name)
}

/// Threads of both clients alternate writes and reads; inside, counters show who else is in.
fn mixed<B: lock_core::DistributedLock>(
    clients: &[LockClient<B>; 2],
    name: &lock_core::LockName,
) -> ScenarioResult {
    let writers = AtomicUsize::new(0);
    let readers = AtomicUsize::new(0);
    let breaches = AtomicUsize::new(0);
    thread::scope(|s| -> Result<(), Failure> {
        let workers: Vec<_> = clients
            .iter()
            .flat_map(|client| std::iter::repeat_n(client, 3))
            .enumerate()
            .map(|(index, client)| {
                let lock = ReadWriteLock::new(client, name.clone());
                let (writers, readers, breaches) = (&writers, &readers, &breaches);
                s.spawn(move || -> Result<(), Failure> {
                    for round in 0..ROUNDS {
                        if (round + index) % 3 == 0 {
                            let guard = acquire_within(lock.try_write_for(ACQUIRE_BOUND), lock.name())?;
                            let others =
                                writers.fetch_add(1, Ordering::SeqCst) + readers.load(Ordering::SeqCst);
                            thread::sleep(Duration::from_millis(1));
                            if others > 0 || readers.load(Ordering::SeqCst) > 0 {
                                breaches.fetch_add(1, Ordering::SeqCst);
                            }
                            writers.fetch_sub(1, Ordering::SeqCst);
                            guard.unlock()?;
                        } else {
                            let guard = acquire_within(lock.try_read_for(ACQUIRE_BOUND), lock.name())?;
                            readers.fetch_add(1, Ordering::SeqCst);
                            if writers.load(Ordering::SeqCst) > 0 {
                                breaches.fetch_add(1, Ordering::SeqCst);
                            }
                            thread::sleep(Duration::from_millis(1));
                            readers.fetch_sub(1, Ordering::SeqCst);
                            guard.unlock()?;
                        }
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
    let breached = breaches.load(Ordering::SeqCst);
    ensure!(breached == 0, "a writer shared the lock with another holder {breached} times");
    Ok(Verdict::Pass)
}
