//! The comparison's results: what `report.json` holds (stable field names), and what the
//! terminal, Markdown and HTML renderings are made from.

use serde::Serialize;

use crate::kinds::Properties;

/// Everything one `distlock compare` run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The `distlock` version that ran it.
    pub distlock_version: &'static str,
    /// `quick` or `full`.
    pub mode: &'static str,
    /// Seconds the run took.
    pub elapsed_s: f64,
    /// The scenarios of the matrix, in order: those of S01–S16 and ML01 that were selected.
    pub scenarios: Vec<ScenarioInfo>,
    /// One entry per backend kind, in the order of `distlock kinds`.
    pub kinds: Vec<KindReport>,
    /// Whether every cell passed or was n/a, every broken recipe was caught, and every workload
    /// ran: the exit status is 0 exactly then.
    pub ok: bool,
}

/// A scenario of `docs/scenarios.md`.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioInfo {
    /// The stable id (`S01`).
    pub id: &'static str,
    /// What it checks.
    pub title: &'static str,
}

/// One backend kind's results.
#[derive(Debug, Clone, Serialize)]
pub struct KindReport {
    /// The kind's name (`redis-hash`).
    pub name: &'static str,
    /// The label its targets report (`redis reentrant-hash`).
    pub label: String,
    /// `harness` (throwaway servers started by the run) or `user` (servers named on the command
    /// line).
    pub servers: &'static str,
    /// What a client of the kind says about itself; `None` if no client could be built.
    pub properties: Option<Properties>,
    /// One cell per selected scenario, in the order of [`Report::scenarios`].
    pub cells: Vec<Cell>,
    /// The docs' broken recipes shown in this kind's column.
    pub recipes: Vec<RecipeResult>,
    /// The kind's own scenarios (R01–R04, Q01–Q03, Z01–Z03) where its crate ships them.
    pub backend_scenarios: Vec<Cell>,
    /// The workloads; `None` when none was selected.
    pub performance: Option<Performance>,
    /// Why the kind could not be run at all (its servers could not be started or reached).
    pub error: Option<String>,
}

/// One scenario's outcome on one kind.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// The scenario's id.
    pub scenario: &'static str,
    /// What a backend's own scenario checks (the suite's titles are in [`Report::scenarios`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<&'static str>,
    /// The outcome.
    pub status: Status,
    /// The reason (n/a) or the failure message (fail).
    pub detail: Option<String>,
    /// Seconds it took.
    pub seconds: f64,
}

/// How a scenario ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every check held.
    Pass,
    /// Not applicable by design; the detail says why.
    NotApplicable,
    /// A check failed, or the scenario could not run.
    Fail,
}

/// A broken recipe's check: it must fail the scenario it breaks.
#[derive(Debug, Clone, Serialize)]
pub struct RecipeResult {
    /// The stable id (`N01`).
    pub id: &'static str,
    /// The recipe in a few words.
    pub title: &'static str,
    /// The scenario that must catch it.
    pub must_fail: &'static str,
    /// Whether it did.
    pub caught: bool,
    /// How the scenario failed (caught), or why the check failed (not caught).
    pub detail: String,
    /// Seconds it took.
    pub seconds: f64,
}

/// The workloads' numbers, each beside the limit measured in the same run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Performance {
    /// How the round trip was measured; `None` in process.
    pub round_trip_description: Option<String>,
    /// The round trip the workloads are compared with, in ns: the mean of those timed after
    /// each W1 pair, or (without W1) the mean of two measured before and after W2.
    pub round_trip_ns: Option<u64>,
    /// Which workload the round trip was measured beside (`W1`, `W2`).
    pub round_trip_beside: Option<&'static str>,
    /// W1: uncontended pairs.
    pub w1: Option<W1>,
    /// W2: eight workers on one name.
    pub w2: Option<W2>,
    /// W3: eight workers on eight names.
    pub w3: Option<W3>,
    /// A workload that failed, and why.
    pub errors: Vec<String>,
}

/// W1's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct W1 {
    /// Pairs per second.
    pub pairs_per_s: f64,
    /// Pairs per second ÷ 1/(2 × round trip), at most 1.0; `None` in process, or when the
    /// round trip was no lower bound.
    pub ratio_to_limit: Option<f64>,
    /// The ratio, when above 1.0: pairs ran faster than two of the round trips timed beside
    /// them, so the probe is not a lower bound of the lock's requests — a measurement problem,
    /// not a result.
    pub probe_not_a_lower_bound: Option<f64>,
    /// Pair latency p50, ns.
    pub p50_ns: u64,
    /// Pair latency p99, ns.
    pub p99_ns: u64,
    /// For a TLS twin (`pg-row-tls`): pairs per second ÷ the plaintext kind's in the same run.
    pub ratio_to_plaintext: Option<f64>,
}

/// Sets each TLS twin's W1 [`ratio_to_plaintext`](W1::ratio_to_plaintext), where its plaintext
/// kind ran too.
pub fn compare_tls_twins(kinds: &mut [KindReport]) {
    let plaintext: Vec<(&'static str, f64)> = kinds
        .iter()
        .filter_map(|kind| Some((kind.name, kind.performance.as_ref()?.w1.as_ref()?.pairs_per_s)))
        .collect();
    for kind in kinds.iter_mut() {
        let Some(base) = kind.name.strip_suffix(crate::kinds::TLS_SUFFIX) else { continue };
        let Some(&(_, plain)) = plaintext.iter().find(|(name, _)| *name == base) else { continue };
        if let Some(w1) = kind.performance.as_mut().and_then(|performance| performance.w1.as_mut()) {
            w1.ratio_to_plaintext = Some(w1.pairs_per_s / plain);
        }
    }
}

/// W2's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct W2 {
    /// Acquisitions per second.
    pub acquisitions_per_s: f64,
    /// Updates of the shared counter that were lost (must be 0).
    pub lost_updates: u64,
    /// Overlapping critical sections (must be 0).
    pub overlaps: usize,
    /// Failed acquisitions and releases.
    pub errors: usize,
    /// Cross-worker hand-off p50, ns.
    pub handoff_p50_ns: u64,
    /// Cross-worker hand-off p99, ns.
    pub handoff_p99_ns: u64,
    /// Hand-off p50 ÷ round trip; `None` in process.
    pub handoff_ratio_to_rtt: Option<f64>,
    /// Fewest ÷ most acquisitions of one worker (1.0 = perfectly fair).
    pub fairness: f64,
    /// Every cross-worker hand-off, ns (at most 2,000, evenly sampled): the latency chart.
    pub handoffs_ns: Vec<u64>,
}

/// W3's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct W3 {
    /// Pairs per second over all workers.
    pub pairs_per_s: f64,
    /// ÷ W1's pairs per second.
    pub ratio_to_w1: Option<f64>,
}

impl KindReport {
    /// Whether everything this kind ran came out right.
    pub fn ok(&self) -> bool {
        self.error.is_none()
            && self.cells.iter().all(|cell| cell.status != Status::Fail)
            && self.recipes.iter().all(|recipe| recipe.caught)
            && self.backend_scenarios.iter().all(|cell| cell.status != Status::Fail)
            && self
                .performance
                .as_ref()
                .is_none_or(|performance| performance.errors.is_empty() && performance.clean())
    }
}

impl Performance {
    /// No lost update and no overlap in W2.
    pub fn clean(&self) -> bool {
        self.w2.as_ref().is_none_or(|w2| w2.lost_updates == 0 && w2.overlaps == 0)
    }
}
