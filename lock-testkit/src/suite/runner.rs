//! The scenario list and the runner the generated tests call.

use std::time::Instant;

use crate::suite::scenarios;
use crate::suite::{ScenarioResult, SuiteTarget, Verdict};

/// One scenario of `docs/scenarios.md`.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// The stable id (`"S01"`).
    pub id: &'static str,
    /// What it checks, in a few words.
    pub title: &'static str,
}

/// Every core scenario, in order.
pub const SCENARIOS: [Scenario; 31] = [
    Scenario { id: "S01", title: "mutual exclusion under contention" },
    Scenario { id: "S02", title: "try-lock on a held lock" },
    Scenario { id: "S03", title: "timed wait" },
    Scenario { id: "S04", title: "holder crashes (killed -9)" },
    Scenario { id: "S05", title: "acquire and expiry are one atomic step" },
    Scenario { id: "S06", title: "owner-safe release" },
    Scenario { id: "S07", title: "reentrancy" },
    Scenario { id: "S08", title: "lease renewal (watchdog)" },
    Scenario { id: "S09", title: "fencing tokens" },
    Scenario { id: "S10", title: "lock lost underneath the holder" },
    Scenario { id: "S11", title: "hand-off latency (server wake-up)" },
    Scenario { id: "S12", title: "independent names; safe names" },
    Scenario { id: "S13", title: "bad configuration" },
    Scenario { id: "S14", title: "guard life cycle" },
    Scenario { id: "S15", title: "loss on time (a server stops answering)" },
    Scenario { id: "S16", title: "connection cut (the server frees the lock)" },
    Scenario { id: "S17", title: "server restart (immediate, back at once) under holders and waiters" },
    Scenario { id: "ML01", title: "multi-lock {a, b} against {b, a}: no deadlock, all or nothing" },
    Scenario { id: "RW01", title: "read-write: readers share, a writer excludes" },
    Scenario { id: "RW02", title: "read-write: a writer is not starved by a stream of readers" },
    Scenario { id: "RW03", title: "read-write: reentrancy and downgrade; upgrade is WouldDeadlock" },
    Scenario { id: "RW04", title: "read-write: killed reader and writer release their holds" },
    Scenario { id: "SEM01", title: "semaphore: never more than N holders (2 processes)" },
    Scenario { id: "SEM02", title: "semaphore: a killed holder's permit returns" },
    Scenario { id: "SEM03", title: "semaphore: a mismatched count is refused" },
    Scenario {
        id: "GW01",
        title: "guarded writes: a holder paused past its lease writes on resume, refused",
    },
    Scenario {
        id: "GW02",
        title: "guarded writes: a fenced store refuses every late write of an earlier holder",
    },
    Scenario { id: "LE01", title: "election: one leader at any time (8 candidates, 2 processes)" },
    Scenario { id: "LE02", title: "election: a killed leader is followed within the lease + 1 s" },
    Scenario { id: "LE03", title: "election: a partitioned leader is told before anyone else leads" },
    Scenario { id: "LE04", title: "election: proclaim seen by observers; resign hands over at once" },
];

/// Runs scenario `id` against `target` without judging the result (negative controls need the
/// raw result). `test_name` is the libtest path of the calling test (S04 re-runs it in a child).
pub fn run<T: SuiteTarget>(target: &T, id: &str, test_name: &str) -> ScenarioResult {
    match id {
        "S01" => scenarios::mutual_exclusion::run(target),
        "S02" => scenarios::try_lock_on_held_lock::run(target),
        "S03" => scenarios::timed_wait::run(target),
        "S04" => scenarios::holder_crash::run(target, test_name),
        "S05" => scenarios::atomic_acquire_and_expiry::run(target),
        "S06" => scenarios::owner_safe_release::run(target),
        "S07" => scenarios::reentrancy::run(target),
        "S08" => scenarios::lease_renewal::run(target),
        "S09" => scenarios::fencing_tokens::run(target),
        "S10" => scenarios::lock_lost_underneath::run(target),
        "S11" => scenarios::handoff_latency::run(target),
        "S12" => scenarios::independent_and_safe_names::run(target),
        "S13" => scenarios::bad_configuration::run(target),
        "S14" => scenarios::guard_life_cycle::run(target),
        "S15" => scenarios::loss_on_time::run(target),
        "S16" => scenarios::connection_cut::run(target),
        "S17" => scenarios::server_restart::run(target),
        "ML01" => scenarios::multi_lock::run(target),
        "RW01" => scenarios::read_write_exclusion::run(target),
        "RW02" => scenarios::writer_not_starved::run(target),
        "RW03" => scenarios::read_write_reentrancy::run(target),
        "RW04" => scenarios::read_write_crash::run(target, test_name),
        "SEM01" => scenarios::semaphore_bound::run(target, test_name),
        "SEM02" => scenarios::permit_crash::run(target, test_name),
        "SEM03" => scenarios::permits_mismatch::run(target),
        "GW01" => scenarios::paused_writer::run(target, test_name),
        "GW02" => scenarios::fenced_writes::run(target),
        "LE01" => scenarios::one_leader::run(target, test_name),
        "LE02" => scenarios::leader_crash::run(target, test_name),
        "LE03" => scenarios::leader_partitioned::run(target),
        "LE04" => scenarios::proclaim_and_resign::run(target),
        other => Err(crate::suite::Failure(format!("no scenario {other}"))),
    }
}

/// Runs scenario `id` against `target` as a test: prints the verdict and panics on failure.
///
/// `module_test_path` is `module_path!()` plus the test's name, as
/// [`conformance_tests!`](crate::conformance_tests) passes it.
///
/// # Panics
/// When the scenario fails: that is how the test fails.
pub fn run_scenario<T: SuiteTarget>(target: &T, id: &str, module_test_path: &str) {
    // libtest names tests without the crate's own name.
    let test_name = module_test_path.split_once("::").map_or(module_test_path, |(_, rest)| rest);
    let title = SCENARIOS.iter().find(|s| s.id == id).map_or("?", |s| s.title);
    let started = Instant::now();
    let result = run(target, id, test_name);
    let elapsed = started.elapsed();
    let label = target.label();
    match result {
        Ok(Verdict::Pass) => println!("[{label}] {id} {title}: pass ({elapsed:.1?})"),
        Ok(Verdict::NotApplicable(reason)) => println!("[{label}] {id} {title}: n/a: {reason}"),
        Err(failure) => panic!("[{label}] {id} {title}: FAILED after {elapsed:.1?}: {failure}"),
    }
}
