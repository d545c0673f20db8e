//! W1 — uncontended: one worker, one name, 100 warm-up pairs, then 3000 × {acquire, release}
//! ([`Scale::FULL`]).

use serde_json::{json, Value};

use lock_core::Lock;

use crate::suite::{unique_name, SuiteTarget};
use crate::workload::{bench_client, Clock, Percentiles, Scale};

const WARMUP: usize = 100;

/// What W1 measured.
#[derive(Debug, Clone)]
pub struct W1Report {
    /// Nanoseconds of each measured acquire+release pair.
    pub lat_ns: Vec<u64>,
    /// Nanoseconds for all measured pairs.
    pub elapsed_ns: u64,
}

impl W1Report {
    /// Pairs per second.
    pub fn pairs_per_second(&self) -> f64 {
        self.lat_ns.len() as f64 / (self.elapsed_ns as f64 / 1e9)
    }

    /// p50/p99 of one pair.
    pub fn latency(&self) -> Percentiles {
        Percentiles::of(&self.lat_ns)
    }

    /// The raw record: `{"workload":"w1","lat_ns":[…],"elapsed_ns":…,"pairs":3000,"warmup":100}`.
    pub fn to_json(&self) -> Value {
        json!({"workload": "w1", "lat_ns": self.lat_ns, "elapsed_ns": self.elapsed_ns,
               "pairs": self.lat_ns.len(), "warmup": WARMUP})
    }
}

/// Runs W1.
///
/// # Errors
/// The first acquire or release error.
pub fn run<T: SuiteTarget>(target: &T, scale: Scale) -> lock_core::Result<W1Report> {
    let client = bench_client(target)?;
    let lock = Lock::new(&client, unique_name("w1"));
    for _ in 0..WARMUP {
        lock.lock()?.unlock()?;
    }
    let clock = Clock::start();
    let mut lat_ns = Vec::with_capacity(scale.w1_pairs);
    let started = clock.now_ns();
    for _ in 0..scale.w1_pairs {
        let before = clock.now_ns();
        lock.lock()?.unlock()?;
        lat_ns.push(clock.now_ns() - before);
    }
    Ok(W1Report { lat_ns, elapsed_ns: clock.now_ns() - started })
}
