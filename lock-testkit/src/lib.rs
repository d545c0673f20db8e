//! Test support for distlock — not semver-stable.
//!
//! - [`harness`]: real throwaway servers (Redis, PostgreSQL, MariaDB, ZooKeeper) on free loopback
//!   ports, shared across a test run and gone when it ends.
//! - [`suite`]: the docs' conformance suite (`SCENARIOS.md`), written once over
//!   [`DistributedLock`](lock_core::DistributedLock) and registered per backend with
//!   [`conformance_tests!`].
//! - [`workload`]: the benchmark workloads W1–W4, run by the `distlock-bench` binary.
//! - `redis` (feature `redis`): the Redis backend as a suite and workload target.
//! - `redlock` (feature `redis`): Redlock as a suite and workload target, and scenario R02 as a
//!   function any Redlock variant can be run through.
//! - `negative` (feature `redis`): the docs' broken recipes N01–N04 and N06, which must fail the
//!   scenario they break.
#![warn(missing_docs)]

pub mod harness;
#[cfg(feature = "redis")]
pub mod negative;
mod poll;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redlock;
pub mod suite;
pub mod workload;

pub use poll::eventually;
