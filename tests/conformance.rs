//! The docs' conformance suite (`SCENARIOS.md`) against every backend enabled by feature.
//!
//! One registration per backend: `conformance_tests!(module, target)` expands to one test per
//! scenario S01–S14, so `cargo test memory::` runs one backend and `cargo test s06` one scenario
//! on every backend.

lock_testkit::conformance_tests!(memory, lock_testkit::suite::MemoryTarget::new());

// Redis, both layouts, on the shared harness server (or `DISTLOCK_REDIS_URL`).
#[cfg(feature = "redis")]
lock_testkit::conformance_tests!(redis_set_nx, lock_testkit::redis::RedisTarget::set_nx());
#[cfg(feature = "redis")]
lock_testkit::conformance_tests!(redis_hash, lock_testkit::redis::RedisTarget::reentrant_hash());

// Redlock over five independent shared harness nodes (or `DISTLOCK_REDIS_NODES`).
#[cfg(feature = "redis")]
lock_testkit::conformance_tests!(redlock, lock_testkit::redlock::RedlockTarget::shared());
