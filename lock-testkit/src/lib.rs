//! Test support for distlock — not semver-stable. Depends on `lock-core` only: each backend
//! crate brings its own suite targets and broken recipes behind its `testkit` feature.
//!
//! - [`harness`]: real throwaway servers on free loopback ports, shared across a test run and
//!   gone when it ends; each server kind behind its own feature (`redis-server`,
//!   `postgres-server`, `mariadb-server`, `zookeeper-server`).
//! - [`suite`]: the docs' conformance suite (`SCENARIOS.md`), written once over
//!   [`DistributedLock`](lock_core::DistributedLock) and registered per backend with
//!   [`conformance_tests!`].
//! - [`negative`]: the frame the backends' broken recipes (N01–N06) are shipped and checked in.
//! - [`workload`]: the benchmark workloads W1–W4, run by `distlock bench`.
#![warn(missing_docs)]

pub mod harness;
pub mod negative;
mod poll;
pub mod suite;
pub mod workload;

pub use poll::eventually;
