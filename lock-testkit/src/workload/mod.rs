//! Benchmark workloads W1–W4 over [`DistributedLock`](lock_core::DistributedLock), exactly as
//! the foundation issue defines them; `distlock bench` (and `cargo xtask bench`) runs them.
//!
//! Every worker has its own client (built from a [`SuiteTarget`]), all
//! times are read from one monotonic clock in nanoseconds ([`Clock`]), and each report can be
//! written as the raw JSON the issue specifies.

mod clock;
mod contended;
mod independent;
mod renewal_scale;
mod round_trip;
mod stats;
mod uncontended;

pub use clock::Clock;
pub use contended::{run as w2_contended, W2Report};
pub use independent::{run as w3_independent, W3Report};
pub use renewal_scale::{not_applicable as w4_not_applicable, run as w4_renewal_scale, W4Report};
pub use round_trip::{median_round_trip, RoundTripProbe};
pub use stats::{percentile, Percentiles};
pub use uncontended::{run as w1_uncontended, W1Report};

use std::time::Duration;

use lock_core::{LockClient, LockOptions};

use crate::suite::SuiteTarget;

/// The lease every workload uses.
pub const LEASE: Duration = Duration::from_secs(10);

/// A client of its own with the workloads' lease.
///
/// # Errors
/// Whatever connecting reports.
pub fn bench_client<T: SuiteTarget>(target: &T) -> lock_core::Result<LockClient<T::Backend>> {
    Ok(LockClient::with_options(target.backend()?, LockOptions::builder().lease(LEASE).build()?))
}
