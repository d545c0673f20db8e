//! The report's three tables — the matrix (scenarios and broken recipes × kinds), performance,
//! properties — as plain rows, rendered by the terminal, Markdown and HTML writers alike.

use std::time::Duration;

use crate::compare::execute::first_line;
use crate::compare::report::{Report, Status};

/// A table: a header row and body rows of text cells.
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// A table and its numbered footnotes (the matrix's n/a reasons, the performance table's
/// measurement problems).
pub struct Footnoted {
    pub table: Table,
    pub footnotes: Vec<String>,
}

/// Rows = the suite's scenarios, the backends' own scenarios, then the broken recipes; columns =
/// kinds. A cell is `pass`, `n/a [k]` with
/// the reason as footnote k, `FAIL: <first line>`, or for a recipe `caught by S05` / `NOT caught`.
pub fn matrix(report: &Report) -> Footnoted {
    let mut header = vec!["scenario".to_owned()];
    header.extend(report.kinds.iter().map(|kind| kind.name.to_owned()));
    let mut footnotes: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for scenario in &report.scenarios {
        let mut row = vec![format!("{} {}", scenario.id, scenario.title)];
        for kind in &report.kinds {
            let cell = kind.cells.iter().find(|cell| cell.scenario == scenario.id);
            row.push(match (cell, &kind.error) {
                (_, Some(_)) => "not run".to_owned(),
                (None, None) => "—".to_owned(),
                (Some(cell), None) => match cell.status {
                    Status::Pass => "pass".to_owned(),
                    Status::NotApplicable => {
                        let reason = cell.detail.clone().unwrap_or_default();
                        let number = match footnotes.iter().position(|known| *known == reason) {
                            Some(index) => index + 1,
                            None => {
                                footnotes.push(reason);
                                footnotes.len()
                            }
                        };
                        format!("n/a [{number}]")
                    }
                    Status::Fail => {
                        format!("FAIL: {}", first_line(cell.detail.as_deref().unwrap_or_default()))
                    }
                },
            });
        }
        rows.push(row);
    }
    let mut own: Vec<(&str, &str)> = report
        .kinds
        .iter()
        .flat_map(|kind| {
            kind.backend_scenarios.iter().map(|cell| (cell.scenario, cell.title.unwrap_or_default()))
        })
        .collect();
    own.sort_unstable();
    own.dedup_by_key(|(id, _)| *id);
    for (id, title) in own {
        let mut row = vec![format!("{id} {title}")];
        for kind in &report.kinds {
            row.push(match kind.backend_scenarios.iter().find(|cell| cell.scenario == id) {
                Some(cell) if cell.status == Status::Pass => "pass".to_owned(),
                Some(cell) => format!("FAIL: {}", first_line(cell.detail.as_deref().unwrap_or_default())),
                None => "—".to_owned(),
            });
        }
        rows.push(row);
    }
    let mut recipes: Vec<(&str, &str, &str)> = Vec::new();
    for kind in &report.kinds {
        for recipe in &kind.recipes {
            if !recipes.iter().any(|(id, ..)| *id == recipe.id) {
                recipes.push((recipe.id, recipe.title, recipe.must_fail));
            }
        }
    }
    recipes.sort_unstable();
    for (id, title, must_fail) in recipes {
        let mut row = vec![format!("{id} {title} (must fail {must_fail})")];
        for kind in &report.kinds {
            row.push(match kind.recipes.iter().find(|recipe| recipe.id == id) {
                Some(recipe) if recipe.caught => format!("caught by {}", recipe.must_fail),
                Some(recipe) => format!("NOT caught: {}", first_line(&recipe.detail)),
                None => "—".to_owned(),
            });
        }
        rows.push(row);
    }
    for kind in report.kinds.iter().filter(|kind| kind.error.is_some()) {
        footnotes.push(format!("{} was not run: {}", kind.name, kind.error.as_deref().unwrap_or_default()));
    }
    Footnoted { table: Table { header, rows }, footnotes }
}

/// One row per kind: round trip, W1 (and its ratio to 1/(2 × RTT)), W2 (rate, lost updates and
/// overlaps, hand-off p50 and its ratio to RTT, fairness), W3 (and its ratio to W1). A W1 ratio
/// above 1.0 is shown as what it is — a round trip that was no lower bound — in a footnote.
pub fn performance(report: &Report) -> Option<Footnoted> {
    let header = [
        "kind",
        "round trip",
        "W1 pairs/s (× 1/(2×RTT), TLS: × plaintext)",
        "W2 acq/s",
        "W2 lost / overlaps",
        "W2 hand-off p50 (× RTT)",
        "W2 fairness",
        "W3 pairs/s (× W1)",
    ];
    let mut rows = Vec::new();
    let mut footnotes = Vec::new();
    for kind in &report.kinds {
        let Some(performance) = &kind.performance else { continue };
        let rtt = performance.round_trip_ns.map_or("in process".to_owned(), |ns| {
            format!("{} (beside {})", show_ns(ns), performance.round_trip_beside.unwrap_or("?"))
        });
        let w1 = performance.w1.as_ref().map_or("—".to_owned(), |w1| {
            let limit = match (w1.ratio_to_limit, w1.probe_not_a_lower_bound) {
                (Some(ratio), _) => format!(" ({ratio:.2})"),
                (None, Some(ratio)) => {
                    footnotes.push(format!(
                        "{}: W1's pairs ran faster than two of the round trips timed beside them ({ratio:.2} × \
                         1/(2×RTT)), so that round trip is no lower bound of this kind's requests: a \
                         measurement problem, not a result; no ratio is shown",
                        kind.name
                    ));
                    format!(" (no ratio [{}])", footnotes.len())
                }
                (None, None) => String::new(),
            };
            let tls = w1.ratio_to_plaintext.map_or(String::new(), |ratio| format!(", {ratio:.2} × plaintext"));
            format!("{:.0}{limit}{tls}", w1.pairs_per_s)
        });
        let (rate, clean, handoff, fairness) = performance.w2.as_ref().map_or_else(
            || ("—".to_owned(), "—".to_owned(), "—".to_owned(), "—".to_owned()),
            |w2| {
                (
                    format!("{:.0}", w2.acquisitions_per_s),
                    format!("{} / {}", w2.lost_updates, w2.overlaps),
                    format!(
                        "{}{}",
                        show_ns(w2.handoff_p50_ns),
                        w2.handoff_ratio_to_rtt.map_or(String::new(), |r| format!(" ({r:.2})"))
                    ),
                    format!("{:.2}", w2.fairness),
                )
            },
        );
        let w3 = performance.w3.as_ref().map_or("—".to_owned(), |w3| {
            format!("{:.0}{}", w3.pairs_per_s, w3.ratio_to_w1.map_or(String::new(), |r| format!(" ({r:.2})")))
        });
        rows.push(vec![kind.name.to_owned(), rtt, w1, rate, clean, handoff, fairness, w3]);
    }
    (!rows.is_empty())
        .then(|| Footnoted { table: Table { header: header.map(str::to_owned).to_vec(), rows }, footnotes })
}

/// One row per kind: what a client of it says about itself.
pub fn properties(report: &Report) -> Table {
    let header = ["kind", "hold", "fencing token", "wake-up", "reentrancy", "failover", "guarded writes"];
    let rows = report
        .kinds
        .iter()
        .filter_map(|kind| {
            let p = kind.properties.as_ref()?;
            Some(vec![
                kind.name.to_owned(),
                p.hold.to_owned(),
                p.fencing.clone(),
                p.wake_up.clone(),
                p.reentrancy.clone(),
                p.failover.clone(),
                p.guarded_writes.clone(),
            ])
        })
        .collect();
    Table { header: header.map(str::to_owned).to_vec(), rows }
}

/// A duration in ns, shortly (`412.3µs`).
pub fn show_ns(ns: u64) -> String {
    format!("{:.1?}", Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::report::{KindReport, Performance, W1};

    fn kind(
        name: &'static str,
        ratio_to_limit: Option<f64>,
        probe_not_a_lower_bound: Option<f64>,
    ) -> KindReport {
        KindReport {
            name,
            label: name.to_owned(),
            servers: "harness",
            properties: None,
            cells: Vec::new(),
            recipes: Vec::new(),
            backend_scenarios: Vec::new(),
            performance: Some(Performance {
                round_trip_description: Some("PING".into()),
                round_trip_ns: Some(50_000),
                round_trip_beside: Some("W1"),
                w1: Some(W1 {
                    pairs_per_s: 9_000.0,
                    ratio_to_limit,
                    probe_not_a_lower_bound,
                    p50_ns: 1,
                    p99_ns: 2,
                    ratio_to_plaintext: None,
                }),
                ..Performance::default()
            }),
            error: None,
        }
    }

    #[test]
    fn a_ratio_above_one_is_shown_as_a_measurement_problem_not_a_result() {
        let report = Report {
            distlock_version: "0",
            mode: "quick",
            elapsed_s: 1.0,
            scenarios: Vec::new(),
            kinds: vec![kind("fine", Some(0.8), None), kind("odd", None, Some(1.3))],
            ok: true,
        };
        let performance = performance(&report).unwrap();
        assert_eq!(performance.table.rows[0][2], "9000 (0.80)");
        assert_eq!(performance.table.rows[0][1], "50.0µs (beside W1)");
        assert_eq!(performance.table.rows[1][2], "9000 (no ratio [1])");
        assert!(!performance.table.rows[1][2].contains("1.3"), "never printed as a ratio");
        assert_eq!(performance.footnotes.len(), 1);
        assert!(
            performance.footnotes[0].starts_with("odd: ")
                && performance.footnotes[0].contains("measurement problem")
        );
    }
}
