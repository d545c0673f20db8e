//! W2 — contended: 8 threads, one name, started together; for 5 s each loops {blocking acquire;
//! `ta` = now; non-atomic read-modify-write of a counter kept outside the lock; `tr` = now;
//! release}.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use lock_core::Lock;

use crate::suite::{unique_name, SuiteTarget};
use crate::workload::{bench_client, Clock, Percentiles, Scale};

const WORKERS: usize = 8;

/// What W2 measured.
#[derive(Debug, Clone)]
pub struct W2Report {
    /// When the workers were released, ns on the run's clock.
    pub start_ns: u64,
    /// When the last worker stopped.
    pub end_ns: u64,
    /// The counter after the run (equals the number of acquisitions unless updates were lost).
    pub final_counter: u64,
    /// One `(worker, ta_ns, tr_ns)` per acquisition.
    pub records: Vec<(usize, u64, u64)>,
    /// Failed acquisitions.
    pub acquire_errors: usize,
    /// Failed releases.
    pub release_errors: usize,
    /// How long the workers contended.
    pub duration: Duration,
}

/// Hand-off times between consecutive holders.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handoffs {
    /// `ta` − previous `tr` over all acquisitions.
    pub all: Percentiles,
    /// The same over acquisitions by a different worker than the previous holder.
    pub cross_worker: Percentiles,
    /// The share of acquisitions that changed worker.
    pub cross_worker_share: f64,
}

impl W2Report {
    fn sorted(&self) -> Vec<(usize, u64, u64)> {
        let mut records = self.records.clone();
        records.sort_by_key(|&(_, ta, _)| ta);
        records
    }

    /// Acquisitions per second.
    pub fn acquisitions_per_second(&self) -> f64 {
        self.records.len() as f64 / ((self.end_ns - self.start_ns) as f64 / 1e9)
    }

    /// Acquisitions whose update of the counter was lost.
    pub fn lost_updates(&self) -> u64 {
        (self.records.len() as u64).saturating_sub(self.final_counter)
    }

    /// Acquisitions that began before an earlier acquisition ended (two holders at once).
    pub fn overlaps(&self) -> usize {
        let mut latest_release = 0;
        let mut overlaps = 0;
        for (index, (_, ta, tr)) in self.sorted().into_iter().enumerate() {
            if index > 0 && ta < latest_release {
                overlaps += 1;
            }
            latest_release = latest_release.max(tr);
        }
        overlaps
    }

    /// Hand-off latency, overall and across workers.
    pub fn handoffs(&self) -> Handoffs {
        let records = self.sorted();
        let (mut all, mut cross) = (Vec::new(), Vec::new());
        for pair in records.windows(2) {
            let ((previous_worker, _, previous_tr), (worker, ta, _)) = (pair[0], pair[1]);
            let gap = ta.saturating_sub(previous_tr);
            all.push(gap);
            if worker != previous_worker {
                cross.push(gap);
            }
        }
        let share = if all.is_empty() { 0.0 } else { cross.len() as f64 / all.len() as f64 };
        Handoffs {
            all: Percentiles::of(&all),
            cross_worker: Percentiles::of(&cross),
            cross_worker_share: share,
        }
    }

    /// Every hand-off to a different worker than the previous holder, in ns (`ta` − previous
    /// `tr`): the distribution behind the cross-worker hand-off percentiles.
    pub fn cross_worker_handoffs_ns(&self) -> Vec<u64> {
        self.sorted()
            .windows(2)
            .filter(|pair| pair[0].0 != pair[1].0)
            .map(|pair| pair[1].1.saturating_sub(pair[0].2))
            .collect()
    }

    /// The fewest and most acquisitions of one worker.
    pub fn per_worker_min_max(&self) -> (usize, usize) {
        let mut counts = [0usize; WORKERS];
        for &(worker, _, _) in &self.records {
            counts[worker] += 1;
        }
        (counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0))
    }

    /// The raw record, as the issue specifies.
    pub fn to_json(&self) -> Value {
        let records: Vec<[u64; 3]> =
            self.records.iter().map(|&(worker, ta, tr)| [worker as u64, ta, tr]).collect();
        json!({"workload": "w2", "workers": WORKERS, "duration_s": self.duration.as_secs_f64(),
               "start_ns": self.start_ns, "end_ns": self.end_ns, "final_counter": self.final_counter,
               "records": records, "acquire_errors": self.acquire_errors,
               "release_errors": self.release_errors})
    }
}

/// One W2 worker's way of taking and giving back the contended lock: the lock's client, or a
/// reference recipe run beside it (`distlock bench`'s plain `SET NX PX` loop on Redis).
pub trait Contender: Send {
    /// What a hold keeps until its release.
    type Held;

    /// Blocks until this worker holds the lock.
    ///
    /// # Errors
    /// The acquisition failed (counted, and the worker tries again).
    fn acquire(&mut self) -> Result<Self::Held, String>;

    /// Gives the hold back.
    ///
    /// # Errors
    /// The release failed (counted).
    fn release(&mut self, held: Self::Held) -> Result<(), String>;
}

/// The number of workers W2 runs.
pub const W2_WORKERS: usize = WORKERS;

/// A worker that takes the lock through a client's [`Lock`].
struct LockContender<B: lock_core::DistributedLock>(Lock<B>);

impl<B: lock_core::DistributedLock> Contender for LockContender<B>
where
    Lock<B>: Send,
{
    type Held = lock_core::LockGuard<B>;

    fn acquire(&mut self) -> Result<Self::Held, String> {
        self.0.lock().map_err(|error| error.to_string())
    }

    fn release(&mut self, held: Self::Held) -> Result<(), String> {
        held.unlock().map_err(|error| error.to_string())
    }
}

/// Runs W2.
///
/// # Errors
/// A client that cannot be built; errors during the run are counted, not returned.
pub fn run<T: SuiteTarget>(target: &T, scale: Scale) -> lock_core::Result<W2Report> {
    let name = unique_name("w2");
    let clients = (0..WORKERS).map(|_| bench_client(target)).collect::<lock_core::Result<Vec<_>>>()?;
    let contenders = clients.iter().map(|client| LockContender(Lock::new(client, name.clone()))).collect();
    Ok(run_contenders(contenders, scale.w2_duration))
}

/// W2's loop for [`W2_WORKERS`] `contenders` on one lock, for `duration`: started together, each
/// loops {acquire; `ta`; the counter's unsafe read-modify-write; `tr`; release}, failures
/// counted.
///
/// # Panics
/// When `contenders` is not [`W2_WORKERS`] long.
pub fn run_contenders<C: Contender>(contenders: Vec<C>, duration: Duration) -> W2Report {
    assert_eq!(contenders.len(), WORKERS, "W2 runs {WORKERS} workers");
    let clock = Clock::start();
    let counter = AtomicU64::new(0);
    let (acquire_errors, release_errors) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Barrier::new(WORKERS + 1);
    let start_ns = AtomicU64::new(0);
    let per_worker: Vec<Vec<(usize, u64, u64)>> = thread::scope(|s| {
        let workers: Vec<_> = contenders
            .into_iter()
            .enumerate()
            .map(|(worker, mut contender)| {
                let (clock, counter, start, start_ns) = (&clock, &counter, &start, &start_ns);
                let (acquire_errors, release_errors) = (&acquire_errors, &release_errors);
                s.spawn(move || {
                    let mut records = Vec::new();
                    start.wait();
                    let end = start_ns.load(Ordering::SeqCst) + duration.as_nanos() as u64;
                    while clock.now_ns() < end {
                        let Ok(held) = contender.acquire() else {
                            acquire_errors.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        let ta = clock.now_ns();
                        // The unsafe read-modify-write the lock protects.
                        let read = counter.load(Ordering::SeqCst);
                        std::hint::black_box(read);
                        counter.store(read + 1, Ordering::SeqCst);
                        let tr = clock.now_ns();
                        if contender.release(held).is_err() {
                            release_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        records.push((worker, ta, tr));
                    }
                    records
                })
            })
            .collect();
        start_ns.store(clock.now_ns(), Ordering::SeqCst);
        start.wait();
        workers.into_iter().map(|worker| worker.join().unwrap_or_default()).collect()
    });
    W2Report {
        start_ns: start_ns.load(Ordering::SeqCst),
        end_ns: clock.now_ns(),
        final_counter: counter.load(Ordering::SeqCst),
        records: per_worker.into_iter().flatten().collect(),
        acquire_errors: acquire_errors.load(Ordering::Relaxed),
        release_errors: release_errors.load(Ordering::Relaxed),
        duration,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(records: Vec<(usize, u64, u64)>, final_counter: u64) -> W2Report {
        W2Report {
            start_ns: 0,
            end_ns: 1_000_000_000,
            final_counter,
            records,
            acquire_errors: 0,
            release_errors: 0,
            duration: Duration::from_secs(1),
        }
    }

    #[test]
    fn overlaps_lost_updates_and_handoffs_are_derived_from_records() {
        let clean = report(vec![(0, 10, 20), (1, 25, 30), (1, 31, 40)], 3);
        assert_eq!((clean.overlaps(), clean.lost_updates()), (0, 0));
        let handoffs = clean.handoffs();
        assert_eq!(handoffs.all.p50, 1);
        assert_eq!(handoffs.cross_worker.p50, 5);
        assert!((handoffs.cross_worker_share - 0.5).abs() < 1e-9);
        // The second acquisition starts before the first ends: one overlap, one lost update.
        let broken = report(vec![(0, 10, 20), (1, 15, 30)], 1);
        assert_eq!((broken.overlaps(), broken.lost_updates()), (1, 1));
        assert_eq!(broken.per_worker_min_max(), (0, 1));
    }
}
