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

/// The matrix and its footnotes (the n/a reasons, numbered).
pub struct Matrix {
    pub table: Table,
    pub footnotes: Vec<String>,
}

/// Rows = the suite's scenarios, the backends' own scenarios, then the broken recipes; columns =
/// kinds. A cell is `pass`, `n/a [k]` with
/// the reason as footnote k, `FAIL: <first line>`, or for a recipe `caught by S05` / `NOT caught`.
pub fn matrix(report: &Report) -> Matrix {
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
    Matrix { table: Table { header, rows }, footnotes }
}

/// One row per kind: round trip, W1 (and its ratio to 1/(2 × RTT)), W2 (rate, lost updates and
/// overlaps, hand-off p50 and its ratio to RTT, fairness), W3 (and its ratio to W1).
pub fn performance(report: &Report) -> Option<Table> {
    let header = [
        "kind",
        "round trip",
        "W1 pairs/s (× 1/(2×RTT))",
        "W2 acq/s",
        "W2 lost / overlaps",
        "W2 hand-off p50 (× RTT)",
        "W2 fairness",
        "W3 pairs/s (× W1)",
    ];
    let mut rows = Vec::new();
    for kind in &report.kinds {
        let Some(performance) = &kind.performance else { continue };
        let rtt = performance.round_trip_ns.map_or("in process".to_owned(), show_ns);
        let w1 = performance.w1.as_ref().map_or("—".to_owned(), |w1| {
            format!(
                "{:.0}{}",
                w1.pairs_per_s,
                w1.ratio_to_limit.map_or(String::new(), |r| format!(" ({r:.2})"))
            )
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
    (!rows.is_empty()).then(|| Table { header: header.map(str::to_owned).to_vec(), rows })
}

/// One row per kind: what a client of it says about itself.
pub fn properties(report: &Report) -> Table {
    let header = ["kind", "hold", "fencing token", "wake-up", "reentrancy", "failover"];
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
            ])
        })
        .collect();
    Table { header: header.map(str::to_owned).to_vec(), rows }
}

/// A duration in ns, shortly (`412.3µs`).
pub fn show_ns(ns: u64) -> String {
    format!("{:.1?}", Duration::from_nanos(ns))
}
