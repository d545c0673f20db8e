//! The docs' conformance suite (`SCENARIOS.md`) against every backend enabled by feature.
//!
//! One registration per backend: `conformance_tests!(module, target)` expands to one test per
//! scenario S01–S14, so `cargo test memory::` runs one backend and `cargo test s06` one scenario
//! on every backend.

lock_testkit::conformance_tests!(memory, lock_testkit::suite::MemoryTarget::new());
