//! W3 — independent: 8 threads, one name each, 10 warm-up pairs, then W1's loop for 5 s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use lock_core::Lock;

use crate::suite::{unique_name, SuiteTarget};
use crate::workload::{bench_client, Clock, Percentiles, Scale};

const WORKERS: usize = 8;
const WARMUP: usize = 10;

/// What W3 measured.
#[derive(Debug, Clone)]
pub struct W3Report {
    /// When the measured loops started.
    pub start_ns: u64,
    /// When the last worker stopped.
    pub end_ns: u64,
    /// Per worker: pairs done and when its last pair ended.
    pub per_worker: Vec<(usize, u64)>,
    /// Nanoseconds of every pair of every worker.
    pub lat_ns: Vec<u64>,
    /// How long the workers ran.
    pub duration: Duration,
}

impl W3Report {
    /// Pairs per second over all workers.
    pub fn pairs_per_second(&self) -> f64 {
        self.lat_ns.len() as f64 / ((self.end_ns - self.start_ns) as f64 / 1e9)
    }

    /// p50/p99 of one pair.
    pub fn latency(&self) -> Percentiles {
        Percentiles::of(&self.lat_ns)
    }

    /// The raw record, as the issue specifies.
    pub fn to_json(&self) -> Value {
        let per_worker: Vec<Value> = self
            .per_worker
            .iter()
            .enumerate()
            .map(|(idx, &(count, last_ns))| json!({"idx": idx, "count": count, "last_ns": last_ns}))
            .collect();
        json!({"workload": "w3", "workers": WORKERS, "duration_s": self.duration.as_secs_f64(),
               "start_ns": self.start_ns, "end_ns": self.end_ns, "per_worker": per_worker,
               "lat_ns": self.lat_ns})
    }
}

/// Runs W3.
///
/// # Errors
/// A client that cannot be built, or the first acquire or release error of any worker.
pub fn run<T: SuiteTarget>(target: &T, scale: Scale) -> lock_core::Result<W3Report> {
    let clients = (0..WORKERS).map(|_| bench_client(target)).collect::<lock_core::Result<Vec<_>>>()?;
    let clock = Clock::start();
    let start = Barrier::new(WORKERS + 1);
    let start_ns = AtomicU64::new(0);
    let outcomes: Vec<lock_core::Result<(Vec<u64>, u64)>> = thread::scope(|s| {
        let workers: Vec<_> = clients
            .iter()
            .map(|client| {
                let lock = Lock::new(client, unique_name("w3"));
                let (start, start_ns) = (&start, &start_ns);
                s.spawn(move || {
                    for _ in 0..WARMUP {
                        lock.lock()?.unlock()?;
                    }
                    start.wait();
                    let end = start_ns.load(Ordering::SeqCst) + scale.w3_duration.as_nanos() as u64;
                    let (mut lat_ns, mut last_ns) = (Vec::new(), 0);
                    while last_ns < end {
                        let before = clock.now_ns();
                        lock.lock()?.unlock()?;
                        last_ns = clock.now_ns();
                        lat_ns.push(last_ns - before);
                    }
                    Ok((lat_ns, last_ns))
                })
            })
            .collect();
        // Warm-ups done (every worker is at the barrier): the measured run starts now.
        start_ns.store(clock.now_ns(), Ordering::SeqCst);
        start.wait();
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|_| Err(lock_core::Error::backend("bench", "a W3 worker panicked")))
            })
            .collect()
    });
    let start_ns = start_ns.load(Ordering::SeqCst);
    let mut per_worker = Vec::with_capacity(WORKERS);
    let mut lat_ns = Vec::new();
    for outcome in outcomes {
        let (latencies, last_ns) = outcome?;
        per_worker.push((latencies.len(), last_ns));
        lat_ns.extend(latencies);
    }
    let end_ns = per_worker.iter().map(|&(_, last)| last).max().unwrap_or(start_ns);
    Ok(W3Report { start_ns, end_ns, per_worker, lat_ns, duration: scale.w3_duration })
}
