//! Benchmark workloads W1–W6 over [`DistributedLock`](lock_core::DistributedLock), exactly as
//! the foundation issue defines them; `distlock bench` (and `cargo xtask bench`) runs them.
//!
//! Every worker has its own client (built from a [`SuiteTarget`]), all
//! times are read from one monotonic clock in nanoseconds ([`Clock`]), and each report can be
//! written as the raw JSON the issue specifies.

mod clock;
mod contended;
mod independent;
mod read_mostly;
mod renewal_scale;
mod round_trip;
mod semaphore;
mod stats;
mod uncontended;

pub use clock::Clock;
pub use contended::{run as w2_contended, run_contenders as w2_contenders, Contender, W2Report, W2_WORKERS};
pub use independent::{run as w3_independent, W3Report};
pub use read_mostly::{run as w5_read_mostly, W5Report};
pub use renewal_scale::{not_applicable as w4_not_applicable, run as w4_renewal_scale, W4Report};
pub use round_trip::{RoundTripProbe, RoundTrips, TimeOne};
pub use semaphore::{run as w6_semaphore, W6Report, W6_HOLD, W6_PERMITS};
pub use stats::{percentile, Percentiles};
pub use uncontended::{run as w1_uncontended, W1Limit, W1Report};

use std::time::Duration;

use lock_core::{LockClient, LockOptions};

use crate::suite::SuiteTarget;

/// How long W1–W3 run: [`Scale::FULL`] for `distlock bench` (the sizes the results in the
/// README were measured with), [`Scale::QUICK`] for `distlock compare --quick`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// W1's measured pairs (after 100 warm-up pairs).
    pub w1_pairs: usize,
    /// How long W2's workers contend.
    pub w2_duration: Duration,
    /// How long W3's workers run.
    pub w3_duration: Duration,
}

impl Scale {
    /// The benchmark's sizes: 3,000 W1 pairs, 5 s of W2 and of W3.
    pub const FULL: Scale =
        Scale { w1_pairs: 3000, w2_duration: Duration::from_secs(5), w3_duration: Duration::from_secs(5) };
    /// A tenth of W1, a fifth of W2 and W3: enough for the shape, not for a tight number.
    pub const QUICK: Scale =
        Scale { w1_pairs: 300, w2_duration: Duration::from_secs(1), w3_duration: Duration::from_secs(1) };
}

/// The lease every workload uses.
pub const LEASE: Duration = Duration::from_secs(10);

/// A client of its own with the workloads' lease.
///
/// # Errors
/// Whatever connecting reports.
pub fn bench_client<T: SuiteTarget>(target: &T) -> lock_core::Result<LockClient<T::Backend>> {
    Ok(LockClient::with_options(target.backend()?, bench_options()?))
}

/// The options of every benchmark client.
fn bench_options() -> lock_core::Result<LockOptions> {
    LockOptions::builder().lease(LEASE).build()
}
