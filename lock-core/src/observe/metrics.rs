//! The metrics distlock records through the [`metrics`](https://docs.rs/metrics) facade with the
//! `metrics` feature: their names, units and labels. Without the feature nothing is recorded
//! and nothing of the `metrics` crate is compiled in.
//!
//! Install a recorder (an exporter: Prometheus, StatsD, OpenTelemetry, …) *before* building
//! clients: each client registers its handles once, when it is built, so the hot path costs
//! one atomic add per metric.
//!
//! Every metric but [`POOL_WAIT`] carries `backend` (`"redis"`, `"postgres"`, `"mysql"`, `"zookeeper"`,
//! `"memory"`) and `kind` (the lock layout: `"redis-hash"`, `"pg-row"`, …; see
//! [`DistributedLock::kind_name`](crate::DistributedLock::kind_name)). The per-lock ones add
//! `mode` (`"mutex"`, `"read"`, `"write"`, `"permit"`, `"leader"`) and, only with
//! [`LockOptionsBuilder::name_label`](crate::LockOptionsBuilder::name_label), `name`: lock names
//! are unbounded, so they are off by default.
//!
//! | name | type | unit | labels beyond `backend`, `kind` | counts |
//! | --- | --- | --- | --- | --- |
//! | [`distlock_acquisitions_total`](ACQUISITIONS) | counter | | `mode`, `name`? | locks acquired from the server (re-entries are not: they ask no server) |
//! | [`distlock_acquisitions_contended_total`](CONTENDED_ACQUISITIONS) | counter | | `mode`, `name`? | of those, the ones that found the lock held and waited |
//! | [`distlock_acquire_timeouts_total`](ACQUIRE_TIMEOUTS) | counter | | `mode`, `name`? | `try_lock` calls refused at once and `try_…_for`/`_until` calls that gave up, with the lock still held (contention, not an error) |
//! | [`distlock_acquire_errors_total`](ACQUIRE_ERRORS) | counter | | `mode`, `name`? | acquisitions that failed with an error |
//! | [`distlock_acquire_wait_seconds`](ACQUIRE_WAIT) | histogram | seconds | `mode`, `name`? | from the call to the grant, for acquisitions |
//! | [`distlock_hold_seconds`](HOLD_TIME) | histogram | seconds | `mode`, `name`? | from the grant to the release, or to the loss |
//! | [`distlock_renewals_total`](RENEWALS) | counter | | `outcome` = `confirmed`, `lost`, `failed` | lease renewals and session liveness checks, one per hold. A loss found by a renewal is `lost` (the server said the lock is gone, or a session kind found its session ended); one that lets the lease run out while renewals fail is `failed`, then lost by the clock; a loss by the clock with renewal off, or seen by the holder's release first, has no renewal outcome (`losses_total` counts every loss once) |
//! | [`distlock_renewal_batch_seconds`](RENEWAL_BATCH) | histogram | seconds | | one batch of renewals (one server call, or one per hold for session kinds) |
//! | [`distlock_losses_total`](LOSSES) | counter | | `mode`, `name`? | holds reported lost |
//! | [`distlock_in_doubt_total`](IN_DOUBT) | counter | | `mode`, `name`? | episodes of a hold in doubt: a session hold's liveness check failed or its session is suspended, or a lease's server may have lost it (the backend's doubt signal: a Redis primary unreachable, a failover under way) |
//! | [`distlock_release_failures_total`](RELEASE_FAILURES) | counter | | `mode`, `name`?, `reason` = `not_held`, `error` | releases the server refused or could not be asked for (not those of holds already reported lost) |
//! | [`distlock_pool_wait_seconds`](POOL_WAIT) | histogram | seconds | only `backend` | connection checkouts: the wait for an idle connection, or for a new one to open (Redis, PostgreSQL, MySQL; pools are per server, not per lock kind) |

/// Counter: locks acquired from the server.
pub const ACQUISITIONS: &str = "distlock_acquisitions_total";
/// Counter: acquisitions that found the lock held and had to wait.
pub const CONTENDED_ACQUISITIONS: &str = "distlock_acquisitions_contended_total";
/// Counter: `try_` acquisitions that gave up with the lock still held.
pub const ACQUIRE_TIMEOUTS: &str = "distlock_acquire_timeouts_total";
/// Counter: acquisitions that failed with an error.
pub const ACQUIRE_ERRORS: &str = "distlock_acquire_errors_total";
/// Histogram, seconds: from an acquiring call to its grant.
pub const ACQUIRE_WAIT: &str = "distlock_acquire_wait_seconds";
/// Histogram, seconds: from a grant to its release or loss.
pub const HOLD_TIME: &str = "distlock_hold_seconds";
/// Counter, label `outcome`: lease renewals and session liveness checks, one per hold.
pub const RENEWALS: &str = "distlock_renewals_total";
/// Histogram, seconds: one renewal batch.
pub const RENEWAL_BATCH: &str = "distlock_renewal_batch_seconds";
/// Counter: holds reported lost.
pub const LOSSES: &str = "distlock_losses_total";
/// Counter: episodes of a session hold in doubt.
pub const IN_DOUBT: &str = "distlock_in_doubt_total";
/// Counter, label `reason`: releases refused by the server or not delivered.
pub const RELEASE_FAILURES: &str = "distlock_release_failures_total";
/// Histogram, seconds: waits for a pooled connection.
pub const POOL_WAIT: &str = "distlock_pool_wait_seconds";

use std::time::Duration;

use super::handles::{self, Histogram};

/// Registers each metric's description and unit with the installed recorder (exporters show
/// them as `# HELP` lines). Every client does it when it is built; call it yourself to have
/// them before that. Does nothing without the `metrics` feature.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{describe_counter, describe_histogram, Unit};
        describe_counter!(ACQUISITIONS, "Locks acquired from the server");
        describe_counter!(CONTENDED_ACQUISITIONS, "Acquisitions that found the lock held and waited");
        describe_counter!(ACQUIRE_TIMEOUTS, "try_ acquisitions that gave up with the lock still held");
        describe_counter!(ACQUIRE_ERRORS, "Acquisitions that failed with an error");
        describe_histogram!(ACQUIRE_WAIT, Unit::Seconds, "From an acquiring call to its grant");
        describe_histogram!(HOLD_TIME, Unit::Seconds, "From a grant to its release or loss");
        describe_counter!(RENEWALS, "Lease renewals and session liveness checks, by outcome");
        describe_histogram!(RENEWAL_BATCH, Unit::Seconds, "One batch of renewals or liveness checks");
        describe_counter!(LOSSES, "Holds reported lost");
        describe_counter!(IN_DOUBT, "Episodes of a session hold in doubt");
        describe_counter!(RELEASE_FAILURES, "Releases refused by the server or not delivered");
        describe_histogram!(POOL_WAIT, Unit::Seconds, "Waits for a pooled connection");
    }
}

/// The [`POOL_WAIT`] histogram of one backend: backends time each pool checkout with it.
#[derive(Clone, Debug)]
pub struct PoolWait {
    histogram: Histogram,
}

impl PoolWait {
    /// The histogram labelled with `backend` (as the backend's
    /// [`backend_name`](crate::DistributedLock::backend_name) says).
    pub fn new(backend: &'static str) -> Self {
        Self { histogram: handles::histogram(POOL_WAIT, &vec![("backend", backend.to_owned())]) }
    }

    /// Records one wait for a connection.
    pub fn record(&self, waited: Duration) {
        self.histogram.record(waited.as_secs_f64());
    }
}
