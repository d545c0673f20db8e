//! Test support for distlock — not semver-stable. Depends on `lock-core` only: each backend
//! crate brings its own suite targets and broken recipes behind its `testkit` feature.
//!
//! - [`harness`]: real throwaway servers on free loopback ports, shared across a test run and
//!   gone when it ends; each server kind behind its own feature (`redis-server`,
//!   `postgres-server`, `mariadb-server`, `zookeeper-server`).
//! - [`suite`]: the conformance suite S01–S16 and ML01 (catalogued in the repository's `docs/scenarios.md`, [rendered][scenarios-guide] in the `distlock` facade's docs), written once over
//!   [`DistributedLock`](lock_core::DistributedLock) and registered per backend with
//!   [`conformance_tests!`].
//! - [`negative`]: the frame the backends' broken recipes (N01–N06) are shipped and checked in;
//!   [`BackendScenario`]: the same for each backend's own scenarios (R01–R04, Q01–Q03, Z01–Z03).
//! - [`FaultProxy`]: a loopback TCP proxy a test cuts, as a network partition would (S16).
//! - [`workload`]: the benchmark workloads W1–W4, run by `distlock bench`.
//!
//! The workloads' measured runs: the [benchmarks guide][benchmarks-guide].
//!
//! [scenarios-guide]: https://docs.rs/distlock/latest/distlock/guide/scenarios/index.html
//! [benchmarks-guide]: https://docs.rs/distlock/latest/distlock/guide/benchmarks/index.html
#![warn(missing_docs)]

mod backend_scenario;
mod fault_proxy;
pub mod harness;
pub mod journal;
pub mod negative;
mod poll;
pub mod suite;
mod threads;
pub mod workload;

pub use backend_scenario::{run_backend_scenario, BackendScenario};
pub use fault_proxy::{FaultProxies, FaultProxy};
pub use poll::{eventually, never_held_until_lost};
pub use threads::threads_named;
