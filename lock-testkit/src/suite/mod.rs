//! The docs' conformance suite (`docs/scenarios.md`): every scenario written once, generic over
//! [`DistributedLock`](lock_core::DistributedLock), and run unchanged against every backend.
//!
//! A backend registers by implementing [`SuiteTarget`] (how to make independent clients, plus the
//! probes some scenarios need) and invoking [`conformance_tests!`](crate::conformance_tests),
//! which expands to one `#[test]` per scenario. A scenario the backend cannot support by design
//! reports `n/a` with the reason, printed in the test output; it never passes silently.

pub mod breach;
mod child;
mod fenced;
mod outcome;
mod runner;
mod scenarios;
mod support;
mod target;
mod terms;

/// Set in S04's holder process (this binary re-run with the calling test's name as its first
/// argument): a binary that is not a libtest harness (`distlock compare`) must recognise it and
/// run S04 on the same target again, which then holds the lock until killed.
pub use child::{serve_if_child, HOLD_VAR as S04_HOLD_VARIABLE};
pub use fenced::FencedResource;
pub use outcome::{Failure, ScenarioResult, Verdict};
pub use runner::{run, run_scenario, Scenario, SCENARIOS};
pub use support::{set_name_namespace, unique_name};
pub use target::{
    Abilities, MemoryTarget, NotApplicable, OwnServers, PausableServers, RestartableServers, SuiteTarget,
};

/// Expands to one `#[test]` per scenario (S01–S17, ML01, RW01–RW04, SEM01–SEM03, GW01, GW02, LE01–LE04) in a module named `$module`, each running the
/// scenario against the [`SuiteTarget`] that `$target` evaluates to (once per test: make it cheap,
/// e.g. a handle to servers shared across the run).
///
/// ```no_run
/// lock_testkit::conformance_tests!(memory, lock_testkit::suite::MemoryTarget::new());
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($module:ident, $target:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance_tests!(@tests $target;
                s01_mutual_exclusion "S01",
                s02_try_lock_on_held_lock "S02",
                s03_timed_wait "S03",
                s04_holder_crash "S04",
                s05_atomic_acquire_and_expiry "S05",
                s06_owner_safe_release "S06",
                s07_reentrancy "S07",
                s08_lease_renewal "S08",
                s09_fencing_tokens "S09",
                s10_lock_lost_underneath "S10",
                s11_handoff_latency "S11",
                s12_independent_and_safe_names "S12",
                s13_bad_configuration "S13",
                s14_guard_life_cycle "S14",
                s15_loss_on_time "S15",
                s16_connection_cut "S16",
                s17_server_restart "S17",
                ml01_multi_lock "ML01",
                rw01_read_write_exclusion "RW01",
                rw02_writer_not_starved "RW02",
                rw03_read_write_reentrancy "RW03",
                rw04_read_write_crash "RW04",
                sem01_semaphore_bound "SEM01",
                sem02_permit_crash "SEM02",
                sem03_permits_mismatch "SEM03",
                gw01_paused_writer "GW01",
                gw02_fenced_writes "GW02",
                le01_one_leader "LE01",
                le02_leader_crash "LE02",
                le03_leader_partitioned "LE03",
                le04_proclaim_and_resign "LE04",
            );
        }
    };
    (@tests $target:expr; $($test:ident $id:literal,)*) => {
        $(
            #[test]
            fn $test() {
                $crate::suite::run_scenario(&$target, $id, concat!(module_path!(), "::", stringify!($test)));
            }
        )*
    };
}
