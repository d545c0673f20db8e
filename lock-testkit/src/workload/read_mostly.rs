//! W5 — read-mostly: 8 workers on one read-write lock, each pair a read with probability 9/10
//! and a write otherwise, for the run's duration; then the same 8 workers on the mutex of one
//! name, for as long. Reads per second are set against the mutex's pairs per second on the same
//! kind: what sharing buys readers. Every pair checks in its critical section that no writer is
//! in with anyone else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::RngExt;
use serde_json::{json, Value};

use lock_core::{Lock, LockClient, ReadWriteLock};

use crate::suite::{unique_name, SuiteTarget};
use crate::workload::{bench_client, Scale};

const WORKERS: usize = 8;
/// Reads per ten pairs.
const READS_IN_TEN: u32 = 9;

/// What W5 measured.
#[derive(Debug, Clone)]
pub struct W5Report {
    /// Read pairs done.
    pub reads: usize,
    /// Write pairs done.
    pub writes: usize,
    /// How long the read-write phase ran.
    pub read_write_elapsed: Duration,
    /// Mutex pairs done by the same workers.
    pub mutex_pairs: usize,
    /// How long the mutex phase ran.
    pub mutex_elapsed: Duration,
    /// Critical sections that found a writer in with another holder (must be 0).
    pub overlaps: usize,
}

impl W5Report {
    /// Read pairs per second.
    pub fn reads_per_second(&self) -> f64 {
        self.reads as f64 / self.read_write_elapsed.as_secs_f64()
    }

    /// Write pairs per second.
    pub fn writes_per_second(&self) -> f64 {
        self.writes as f64 / self.read_write_elapsed.as_secs_f64()
    }

    /// The mutex's pairs per second, same workers, same kind.
    pub fn mutex_pairs_per_second(&self) -> f64 {
        self.mutex_pairs as f64 / self.mutex_elapsed.as_secs_f64()
    }

    /// The raw record.
    pub fn to_json(&self) -> Value {
        json!({"workload": "w5", "workers": WORKERS, "reads": self.reads, "writes": self.writes,
               "read_write_s": self.read_write_elapsed.as_secs_f64(), "mutex_pairs": self.mutex_pairs,
               "mutex_s": self.mutex_elapsed.as_secs_f64(), "overlaps": self.overlaps})
    }
}

/// Runs W5 for `scale.w3_duration` per phase.
///
/// # Errors
/// A client that cannot be built, a backend without read-write locks
/// ([`Error::Unsupported`](lock_core::Error::Unsupported)), or the first error of any worker.
pub fn run<T: SuiteTarget>(target: &T, scale: Scale) -> lock_core::Result<W5Report> {
    let clients = (0..WORKERS).map(|_| bench_client(target)).collect::<lock_core::Result<Vec<_>>>()?;
    let name = unique_name("w5");
    let writers = AtomicUsize::new(0);
    let readers = AtomicUsize::new(0);
    let overlaps = AtomicUsize::new(0);
    let (counts, read_write_elapsed) =
        phase(&clients, scale.w3_duration, |client: &LockClient<T::Backend>| {
            let lock = ReadWriteLock::new(client, name.clone());
            let (writers, readers, overlaps) = (&writers, &readers, &overlaps);
            move || -> lock_core::Result<(usize, usize)> {
                if rand::rng().random_range(0..10) < READS_IN_TEN {
                    let guard = lock.read()?;
                    readers.fetch_add(1, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    readers.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock()?;
                    Ok((1, 0))
                } else {
                    let guard = lock.write()?;
                    if writers.fetch_add(1, Ordering::SeqCst) > 0 || readers.load(Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    writers.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock()?;
                    Ok((0, 1))
                }
            }
        })?;
    let mutex_name = unique_name("w5-mutex");
    let (mutex_counts, mutex_elapsed) =
        phase(&clients, scale.w3_duration, |client: &LockClient<T::Backend>| {
            let lock = Lock::new(client, mutex_name.clone());
            move || -> lock_core::Result<(usize, usize)> {
                lock.lock()?.unlock()?;
                Ok((1, 0))
            }
        })?;
    Ok(W5Report {
        reads: counts.0,
        writes: counts.1,
        read_write_elapsed,
        mutex_pairs: mutex_counts.0,
        mutex_elapsed,
        overlaps: overlaps.load(Ordering::SeqCst),
    })
}

/// Runs one worker per item (a client, a semaphore) for `duration`, each repeating the pair
/// `make` builds for it; returns the summed counts and the phase's length.
pub(crate) fn phase<'a, I, F>(
    items: &'a [I],
    duration: Duration,
    make: impl Fn(&'a I) -> F,
) -> lock_core::Result<((usize, usize), Duration)>
where
    F: FnMut() -> lock_core::Result<(usize, usize)> + Send,
{
    let started = Instant::now();
    let end = started + duration;
    let outcomes: Vec<lock_core::Result<(usize, usize)>> = thread::scope(|s| {
        let workers: Vec<_> = items
            .iter()
            .map(|item| {
                let mut pair = make(item);
                s.spawn(move || {
                    let mut counts = (0, 0);
                    while Instant::now() < end {
                        let (a, b) = pair()?;
                        counts = (counts.0 + a, counts.1 + b);
                    }
                    Ok(counts)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker.join().unwrap_or_else(|_| Err(lock_core::Error::backend("bench", "a worker panicked")))
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let mut total = (0, 0);
    for outcome in outcomes {
        let (a, b) = outcome?;
        total = (total.0 + a, total.1 + b);
    }
    Ok((total, elapsed))
}
