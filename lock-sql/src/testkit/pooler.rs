//! PB01 and PB02 of `docs/scenarios.md`: the PostgreSQL kinds through a real PgBouncer (the
//! harness's, in front of its PostgreSQL), in transaction and in session pooling — the suite's
//! scenarios and the contention workload on a target whose URL goes through the pooler.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use lock_core::Error;
use lock_testkit::harness::shared;
use lock_testkit::suite::{self, SuiteTarget as _, Verdict, S04_HOLD_VARIABLE};
use lock_testkit::workload::{w2_contended, Scale};
use lock_testkit::BackendScenario;

use super::{PostgresTarget, SqlKind as _};
use crate::postgres::PostgresLockKind;

/// PB01's scenarios: what a lock must do anywhere, beside the kind's read-write locks,
/// semaphores, guarded writes and elections (which through transaction pooling lose their
/// `LISTEN` wake-ups). Not S13 (PgBouncer's `auth_type = any` takes any password) nor S15–S17
/// (they start servers or proxies of their own).
const SUBSET: [&str; 28] = [
    "S01", "S02", "S03", "S04", "S05", "S06", "S07", "S08", "S09", "S10", "S11", "S12", "S14", "ML01",
    "RW01", "RW02", "RW03", "RW04", "SEM01", "SEM02", "SEM03", "GW01", "GW02", "LE01", "LE02", "LE03",
    "LE04", "W2",
];

/// How many scenarios run at once (they use names of their own, as in the suite's tests).
const PARALLEL: usize = 4;

/// How long the contention workload (W2) runs.
const W2_DURATION: Duration = Duration::from_secs(2);

/// PB01, transaction pooling: pg-table and pg-row run the suite subset (S01–S12, S14, ML01, RW, SEM, GW, LE) and W2 with `pooler=transaction`;
/// pg-advisory is refused at `build` with the error that names transaction pooling.
/// `test_name` is the calling test's libtest path (or `compare/<kind>` in `distlock compare`):
/// holder processes re-run it.
pub fn pb01(kind: PostgresLockKind, test_name: &'static str) -> BackendScenario {
    BackendScenario::new("PB01", "through PgBouncer's transaction pooling", move || {
        if kind == PostgresLockKind::Advisory {
            advisory_is_refused_through_transaction_pooling();
        } else {
            run_through("transaction", kind, test_name);
        }
    })
}

/// PB02, session pooling: every kind runs the suite subset (S01–S12, S14, ML01, RW, SEM, GW, LE and W2) with `pooler=session`.
pub fn pb02(kind: PostgresLockKind, test_name: &'static str) -> BackendScenario {
    BackendScenario::new("PB02", "through PgBouncer's session pooling", move || {
        run_through("session", kind, test_name);
    })
}

/// The URL of the harness's PgBouncer in `mode` (its database alias is the mode's name), with
/// `pooler=<mode>`; in a holder process, the parent's target's URL.
fn pooled_url(mode: &str) -> String {
    if std::env::var_os(S04_HOLD_VARIABLE).is_some() {
        if let Ok(url) = std::env::var(PostgresLockKind::URL_VARIABLE) {
            return url;
        }
    }
    let pgbouncer = shared::pgbouncer().unwrap_or_else(|error| panic!("the shared PgBouncer: {error}"));
    format!("{}{mode}?pooler={mode}", pgbouncer.address())
}

/// What does not apply through `mode` pooling on `kind`, and why.
fn not_applicable(mode: &str, kind: PostgresLockKind, id: &str) -> Option<&'static str> {
    (mode == "transaction" && kind == PostgresLockKind::Table && id == "S11").then_some(
        "no server wake-up through transaction pooling (no LISTEN): waiters re-check within 4-25 ms",
    )
}

fn run_through(mode: &str, kind: PostgresLockKind, test_name: &str) {
    let target = PostgresTarget::at(kind, pooled_url(mode)).without_restart_delay();
    suite::serve_if_child(&target);
    let label = format!("{} through {mode} pooling", target.label());
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| {
                while let Some(id) = SUBSET.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let outcome = match (*id, not_applicable(mode, kind, id)) {
                        (_, Some(reason)) => Ok(format!("n/a: {reason}")),
                        ("W2", None) => contention(&target),
                        (_, None) => scenario(&target, id, test_name),
                    };
                    match outcome {
                        Ok(line) => println!("[{label}] {id}: {line}"),
                        Err(failure) => failures
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(format!("{id}: {failure}")),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(failures.is_empty(), "[{label}] FAILED:\n{}", failures.join("\n"));
}

fn scenario(target: &PostgresTarget, id: &str, test_name: &str) -> Result<String, String> {
    match suite::run(target, id, test_name) {
        Ok(Verdict::Pass) => Ok("pass".into()),
        Ok(Verdict::NotApplicable(reason)) => Ok(format!("n/a: {reason}")),
        Err(failure) => Err(failure.to_string()),
    }
}

/// W2 through the pooler: every acquisition exclusive, no lost update, no failed call.
fn contention(target: &PostgresTarget) -> Result<String, String> {
    let report = w2_contended(target, Scale { w2_duration: W2_DURATION, ..Scale::FULL })
        .map_err(|error| format!("W2 could not start: {error}"))?;
    let summary = format!(
        "{} acquisitions, {:.0}/s, {} overlaps, {} lost updates, {} failed acquisitions, {} failed releases",
        report.records.len(),
        report.acquisitions_per_second(),
        report.overlaps(),
        report.lost_updates(),
        report.acquire_errors,
        report.release_errors
    );
    let clean = report.overlaps() == 0
        && report.lost_updates() == 0
        && report.acquire_errors == 0
        && report.release_errors == 0
        && report.records.len() >= 10;
    if clean {
        Ok(summary)
    } else {
        Err(summary)
    }
}

fn advisory_is_refused_through_transaction_pooling() {
    let target = PostgresTarget::at(PostgresLockKind::Advisory, pooled_url("transaction"));
    let built = target.backend();
    assert!(
        matches!(&built, Err(Error::InvalidConfig { reason })
            if reason.contains("transaction pooling") && reason.contains("pg-table or pg-row")),
        "pg-advisory through transaction pooling: {built:?}"
    );
}
