//! `report.html`: one self-contained page (no script, no font, nothing fetched) with the
//! matrix, the performance and properties tables and the two charts inline as SVG.
//!
//! The page is a few tables around two plotters drawings, so it is written with `format!` and
//! one escaping function rather than a template engine; every text that comes from a run goes
//! through [`escape`].

use std::fmt::Write as _;

use super::charts;
use super::tables::{self, Table};
use crate::compare::report::Report;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:14px}\
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.pass{background:#e6f4ea}td.na{background:#f1f3f4;color:#555}\
td.fail{background:#fce8e6;font-weight:bold}td.caught{background:#e8f0fe}\
.summary{font-size:18px;margin:.5em 0}.ok{color:#137333}.bad{color:#c5221f}\
figure{margin:1em 0}ol{font-size:13px;color:#444}";

/// Numbered notes under a table (`[k]` in a cell is item k).
fn footnotes(body: &mut String, notes: &[String]) {
    if !notes.is_empty() {
        body.push_str("<ol>");
        for note in notes {
            let _ = write!(body, "<li>{}</li>", escape(note));
        }
        body.push_str("</ol>");
    }
}

/// The whole page.
///
/// # Errors
/// When a chart cannot be drawn.
pub fn page(report: &Report) -> Result<String, String> {
    let matrix = tables::matrix(report);
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>distlock compare</h1><p class=\"summary {}\">{}</p><p>{} mode, {:.0} s, distlock {}; \
         kinds: {}</p>",
        if report.ok { "ok" } else { "bad" },
        if report.ok {
            "Every cell pass or n/a, every broken recipe caught."
        } else {
            "Failures: see the red cells."
        },
        escape(report.mode),
        report.elapsed_s,
        escape(report.distlock_version),
        escape(&report.kinds.iter().map(|kind| kind.name).collect::<Vec<_>>().join(", ")),
    );
    body.push_str("<h2>The docs' scenarios and broken recipes</h2>");
    body.push_str(&table(&matrix.table));
    footnotes(&mut body, &matrix.footnotes);
    if let Some(performance) = tables::performance(report) {
        body.push_str("<h2>Performance, beside the server round trip measured in the same run</h2>");
        body.push_str(&table(&performance.table));
        footnotes(&mut body, &performance.footnotes);
    }
    for chart in [charts::throughput(report)?, charts::handoffs(report)?].into_iter().flatten() {
        // plotters' SVG, inline: the page needs nothing from anywhere else.
        let _ = write!(body, "<figure>{chart}</figure>");
    }
    body.push_str("<h2>Properties, as each backend describes itself</h2>");
    body.push_str(&table(&tables::properties(report)));
    Ok(format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>distlock compare</title>\
         <style>{STYLE}</style></head><body>{body}</body></html>\n"
    ))
}

fn table(table: &Table) -> String {
    let mut out = String::from("<table><thead><tr>");
    for cell in &table.header {
        let _ = write!(out, "<th>{}</th>", escape(cell));
    }
    out.push_str("</tr></thead><tbody>");
    for row in &table.rows {
        out.push_str("<tr>");
        for (index, cell) in row.iter().enumerate() {
            let class = if index == 0 { "" } else { class_of(cell) };
            let _ = write!(out, "<td class=\"{class}\">{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// A matrix cell's colour.
fn class_of(cell: &str) -> &'static str {
    if cell == "pass" {
        "pass"
    } else if cell.starts_with("n/a") {
        "na"
    } else if cell.starts_with("FAIL:") || cell.starts_with("NOT caught") || cell == "not run" {
        "fail"
    } else if cell.starts_with("caught") {
        "caught"
    } else {
        ""
    }
}

/// Text as HTML: the five characters that could open markup or end an attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cannot_open_markup() {
        assert_eq!(escape("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
    }
}
