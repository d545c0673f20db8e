//! Running the comparison: the scenarios and the broken recipes on a few worker threads (as
//! `cargo test` would), then the workloads one kind at a time, so that no measurement shares the
//! machine with anything else.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use lock_testkit::negative::BrokenRecipe;
use lock_testkit::suite::{Verdict, SCENARIOS};
use lock_testkit::workload::{Percentiles, Scale, W1Limit};
use lock_testkit::BackendScenario;

use super::progress::Progress;
use super::report::{Cell, Performance, RecipeResult, Status, W1, W2, W3};
use crate::bench::around;
use crate::kinds::{KindTarget, S04_TEST_PREFIX};

/// One kind ready to run: its name, target, the recipes its column shows and its own scenarios.
pub struct Contender {
    pub name: &'static str,
    pub target: Box<dyn KindTarget>,
    pub recipes: Vec<BrokenRecipe>,
    pub own: Vec<BackendScenario>,
}

/// One unit of work for the pool.
enum Job<'a> {
    Scenario { kind: usize, id: &'static str },
    Recipe { kind: usize, recipe: &'a BrokenRecipe },
    Own { kind: usize, scenario: &'a BackendScenario },
}

/// What the pool found, per kind.
#[derive(Default)]
pub struct Found {
    pub cells: Vec<Cell>,
    pub recipes: Vec<RecipeResult>,
    pub own: Vec<Cell>,
}

/// Runs the `scenarios` on every contender and every contender's recipes, `jobs` at a time.
pub fn scenarios_and_recipes(
    contenders: &[Contender],
    scenarios: &[&'static str],
    recipes: bool,
    jobs: usize,
    progress: &Progress,
) -> Vec<Found> {
    let mut queue = VecDeque::new();
    // Scenario by scenario across kinds: the slow ones (S04, S08, S15, S16) spread over the run.
    for &id in scenarios {
        queue.extend((0..contenders.len()).map(|kind| Job::Scenario { kind, id }));
    }
    if recipes {
        for (kind, contender) in contenders.iter().enumerate() {
            queue.extend(contender.recipes.iter().map(|recipe| Job::Recipe { kind, recipe }));
        }
    }
    for (kind, contender) in contenders.iter().enumerate() {
        queue.extend(contender.own.iter().map(|scenario| Job::Own { kind, scenario }));
    }
    let queue = Mutex::new(queue);
    let found: Vec<Mutex<Found>> = contenders.iter().map(|_| Mutex::default()).collect();
    thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                // Take the job and let go of the queue before running it (a `while let` on the
                // lock would hold it for the whole job, and run the jobs one by one).
                let job = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
                let Some(job) = job else { break };
                run_job(contenders, job, &found, progress);
            });
        }
    });
    found
        .into_iter()
        .map(|found| {
            let mut found = found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
            let order = |id: &str| scenarios.iter().position(|s| *s == id);
            found.cells.sort_by_key(|cell| order(cell.scenario));
            found.recipes.sort_by_key(|recipe| recipe.id);
            found.own.sort_by_key(|cell| cell.scenario);
            found
        })
        .collect()
}

fn run_job(contenders: &[Contender], job: Job<'_>, found: &[Mutex<Found>], progress: &Progress) {
    let started = Instant::now();
    match job {
        Job::Scenario { kind, id } => {
            let contender = &contenders[kind];
            let title = SCENARIOS.iter().find(|s| s.id == id).map_or("", |s| s.title);
            let step = format!("{} {id} {title}", contender.name);
            progress.start(&step);
            let test_name = format!("{S04_TEST_PREFIX}{}", contender.name);
            // A panicking scenario is a failed cell, not a dead run.
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                contender.target.scenario(id, &test_name)
            }));
            let (status, detail) = match outcome {
                Ok(Ok(Verdict::Pass)) => (Status::Pass, None),
                Ok(Ok(Verdict::NotApplicable(reason))) => (Status::NotApplicable, Some(reason)),
                Ok(Err(failure)) => (Status::Fail, Some(failure.0)),
                Err(panic) => (Status::Fail, Some(format!("panicked: {}", panic_message(&panic)))),
            };
            let seconds = started.elapsed().as_secs_f64();
            progress.finish(&step, &outcome_text(status, detail.as_deref()));
            lock(&found[kind]).cells.push(Cell { scenario: id, title: None, status, detail, seconds });
        }
        Job::Own { kind, scenario } => {
            let step = format!("{} {} {}", contenders[kind].name, scenario.id, scenario.title);
            progress.start(&step);
            let (status, detail) = match scenario.run() {
                Ok(()) => (Status::Pass, None),
                Err(failure) => (Status::Fail, Some(failure.0)),
            };
            progress.finish(&step, &outcome_text(status, detail.as_deref()));
            let seconds = started.elapsed().as_secs_f64();
            lock(&found[kind]).own.push(Cell {
                scenario: scenario.id,
                title: Some(scenario.title),
                status,
                detail,
                seconds,
            });
        }
        Job::Recipe { kind, recipe } => {
            let step = format!(
                "{} {} {} (must fail {})",
                contenders[kind].name, recipe.id, recipe.title, recipe.caught_by
            );
            progress.start(&step);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| recipe.check()));
            let (caught, detail) = match outcome {
                Ok(Ok(caught)) => (true, caught.how),
                Ok(Err(failure)) => (false, failure.0),
                Err(panic) => (false, format!("panicked: {}", panic_message(&panic))),
            };
            let outcome = if caught {
                format!("caught by {}", recipe.caught_by)
            } else {
                format!("NOT caught: {detail}")
            };
            progress.finish(&step, &outcome);
            lock(&found[kind]).recipes.push(RecipeResult {
                id: recipe.id,
                title: recipe.title,
                must_fail: recipe.caught_by,
                caught,
                detail,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
    }
}

fn lock(found: &Mutex<Found>) -> std::sync::MutexGuard<'_, Found> {
    found.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn outcome_text(status: Status, detail: Option<&str>) -> String {
    match status {
        Status::Pass => "pass".into(),
        Status::NotApplicable => format!("n/a: {}", detail.unwrap_or_default()),
        Status::Fail => format!("FAIL: {}", first_line(detail.unwrap_or_default())),
    }
}

/// The first line of a message, for a cell.
pub fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or_default()
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Hand-offs kept for the latency chart.
const HANDOFF_SAMPLES: usize = 2_000;

/// Runs the selected workloads on one kind. W1 times a round trip after each of its pairs, and
/// everything is compared with their median; without W1, W2 runs between two round-trip
/// measurements and is compared with their mean.
pub fn workloads(
    contender: &Contender,
    workloads: &[&str],
    scale: Scale,
    progress: &Progress,
) -> Performance {
    let target = &*contender.target;
    let mut performance = Performance::default();
    let probe = target.round_trip().unwrap_or_else(|error| {
        performance.errors.push(format!("{} round trip: {error}", contender.name));
        None
    });
    performance.round_trip_description = probe.as_ref().map(|probe| probe.description().to_owned());
    let step = |workload: &str| {
        let step = format!("{} {}", contender.name, workload.to_uppercase());
        progress.start(&step);
        step
    };
    if workloads.contains(&"w1") {
        let name = step("w1");
        match target.w1(scale) {
            Ok(report) => {
                let pairs_per_s = report.pairs_per_second();
                let Percentiles { p50, p99 } = report.latency();
                let (ratio_to_limit, probe_not_a_lower_bound) = match report.limit() {
                    W1Limit::Ratio(ratio) => (Some(ratio), None),
                    W1Limit::ProbeNotALowerBound(ratio) => (None, Some(ratio)),
                    W1Limit::None => (None, None),
                };
                performance.round_trip_ns = report.round_trip().map(nanos);
                performance.round_trip_beside = Some("W1");
                progress.finish(&name, &format!("{pairs_per_s:.0} pairs/s"));
                performance.w1 = Some(W1 {
                    pairs_per_s,
                    ratio_to_limit,
                    probe_not_a_lower_bound,
                    p50_ns: p50,
                    p99_ns: p99,
                    ratio_to_plaintext: None,
                });
            }
            Err(error) => failed(&mut performance, progress, &name, error.to_string()),
        }
    }
    if workloads.contains(&"w2") {
        let name = step("w2");
        let probe = probe.as_ref().filter(|_| performance.round_trip_ns.is_none());
        match around(probe, || target.w2(scale).map_err(|e| e.to_string())) {
            Ok((report, rtt)) => {
                if let Some(rtt) = rtt {
                    performance.round_trip_ns = Some(nanos(rtt.mean()));
                    performance.round_trip_beside = Some("W2");
                }
                let handoffs = report.handoffs();
                let (min, max) = report.per_worker_min_max();
                let all = report.cross_worker_handoffs_ns();
                let step_by = all.len().div_ceil(HANDOFF_SAMPLES).max(1);
                let w2 = W2 {
                    acquisitions_per_s: report.acquisitions_per_second(),
                    lost_updates: report.lost_updates(),
                    overlaps: report.overlaps(),
                    errors: report.acquire_errors + report.release_errors,
                    handoff_p50_ns: handoffs.cross_worker.p50,
                    handoff_p99_ns: handoffs.cross_worker.p99,
                    handoff_ratio_to_rtt: performance
                        .round_trip_ns
                        .map(|rtt| handoffs.cross_worker.p50 as f64 / rtt as f64),
                    fairness: if max == 0 { 0.0 } else { min as f64 / max as f64 },
                    handoffs_ns: all.into_iter().step_by(step_by).collect(),
                };
                progress.finish(&name, &format!("{:.0} acquisitions/s", w2.acquisitions_per_s));
                performance.w2 = Some(w2);
            }
            Err(error) => failed(&mut performance, progress, &name, error),
        }
    }
    if workloads.contains(&"w3") {
        let name = step("w3");
        match target.w3(scale) {
            Ok(report) => {
                let pairs_per_s = report.pairs_per_second();
                let ratio_to_w1 = performance.w1.as_ref().map(|w1| pairs_per_s / w1.pairs_per_s);
                progress.finish(&name, &format!("{pairs_per_s:.0} pairs/s"));
                performance.w3 = Some(W3 { pairs_per_s, ratio_to_w1 });
            }
            Err(error) => failed(&mut performance, progress, &name, error.to_string()),
        }
    }
    performance
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn failed(performance: &mut Performance, progress: &Progress, step: &str, error: String) {
    progress.finish(step, &format!("FAIL: {error}"));
    performance.errors.push(format!("{step}: {error}"));
}
