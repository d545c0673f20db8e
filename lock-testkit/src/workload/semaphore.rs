//! W6 — a semaphore of 3 permits under 8 workers, each taking a permit, holding it for
//! [`W6_HOLD`] and giving it back, for the run's duration: acquisitions per second, and the most
//! holders ever inside at once (3 at most; fewer would mean the permits are not all used).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use lock_core::Semaphore;

use crate::suite::{unique_name, SuiteTarget};
use crate::workload::read_mostly::phase;
use crate::workload::{bench_client, Scale};

const WORKERS: usize = 8;
/// The semaphore's permits.
pub const W6_PERMITS: u32 = 3;
/// How long each worker holds its permit: long enough for the permits to be held together.
pub const W6_HOLD: Duration = Duration::from_millis(1);

/// What W6 measured.
#[derive(Debug, Clone)]
pub struct W6Report {
    /// Permits taken (and given back).
    pub acquisitions: usize,
    /// How long the workers ran.
    pub elapsed: Duration,
    /// The most holders inside at once.
    pub max_holders: usize,
}

impl W6Report {
    /// Acquisitions per second.
    pub fn acquisitions_per_second(&self) -> f64 {
        self.acquisitions as f64 / self.elapsed.as_secs_f64()
    }

    /// The raw record.
    pub fn to_json(&self) -> Value {
        json!({"workload": "w6", "workers": WORKERS, "permits": W6_PERMITS, "hold_s": W6_HOLD.as_secs_f64(), "acquisitions": self.acquisitions,
               "duration_s": self.elapsed.as_secs_f64(), "max_holders": self.max_holders})
    }
}

/// Runs W6 for `scale.w3_duration`.
///
/// # Errors
/// A client that cannot be built, a backend without semaphores
/// ([`Error::Unsupported`](lock_core::Error::Unsupported)), or the first error of any worker.
pub fn run<T: SuiteTarget>(target: &T, scale: Scale) -> lock_core::Result<W6Report> {
    let name = unique_name("w6");
    let semaphores = (0..WORKERS)
        .map(|_| Semaphore::new(&bench_client(target)?, name.clone(), W6_PERMITS))
        .collect::<lock_core::Result<Vec<_>>>()?;
    let inside = AtomicUsize::new(0);
    let max_holders = AtomicUsize::new(0);
    let ((acquisitions, _), elapsed) = phase(&semaphores, scale.w3_duration, |semaphore| {
        let (inside, max_holders) = (&inside, &max_holders);
        move || -> lock_core::Result<(usize, usize)> {
            let permit = semaphore.acquire()?;
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            max_holders.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(W6_HOLD);
            inside.fetch_sub(1, Ordering::SeqCst);
            permit.unlock()?;
            Ok((1, 0))
        }
    })?;
    Ok(W6Report { acquisitions, elapsed, max_holders: max_holders.load(Ordering::SeqCst) })
}
