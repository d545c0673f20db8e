//! The report, rendered: the terminal (comfy-table), `report.md`, `report.json` and the
//! self-contained `report.html` with SVG charts.

mod charts;
mod html;
mod tables;

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table as Comfy};

use crate::compare::report::Report;
use tables::Table;

/// The matrix, its footnotes, the performance and the properties tables, for stdout.
pub fn terminal(report: &Report) -> String {
    let matrix = tables::matrix(report);
    let mut out = String::new();
    let _ = writeln!(out, "\n{}", comfy(&matrix.table));
    for (number, note) in matrix.footnotes.iter().enumerate() {
        let _ = writeln!(out, "[{}] {note}", number + 1);
    }
    if let Some(performance) = tables::performance(report) {
        let _ = writeln!(out, "\n{}", comfy(&performance.table));
        for (number, note) in performance.footnotes.iter().enumerate() {
            let _ = writeln!(out, "[{}] {note}", number + 1);
        }
    }
    let _ = writeln!(out, "\n{}", comfy(&tables::properties(report)));
    let _ = writeln!(
        out,
        "\n{} in {:.0} s ({} mode): {}",
        report.kinds.iter().map(|kind| kind.name).collect::<Vec<_>>().join(", "),
        report.elapsed_s,
        report.mode,
        if report.ok { "every cell pass or n/a, every broken recipe caught" } else { "FAILURES above" }
    );
    out
}

fn comfy(table: &Table) -> Comfy {
    let mut comfy = Comfy::new();
    comfy.load_preset(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
    comfy.set_header(&table.header);
    for row in &table.rows {
        comfy.add_row(row);
    }
    comfy
}

/// The report as Markdown: the same tables and footnotes as the terminal.
pub fn markdown(report: &Report) -> String {
    let matrix = tables::matrix(report);
    let mut out = format!(
        "# distlock compare\n\n{} mode, {:.0} s, distlock {}: {}\n\n## Scenarios and broken recipes\n\n",
        report.mode,
        report.elapsed_s,
        report.distlock_version,
        if report.ok { "every cell pass or n/a, every broken recipe caught" } else { "**failures**" }
    );
    out.push_str(&markdown_table(&matrix.table));
    for (number, note) in matrix.footnotes.iter().enumerate() {
        let _ = writeln!(out, "\n[{}] {}", number + 1, escape_markdown(note));
    }
    if let Some(performance) = tables::performance(report) {
        out.push_str("\n## Performance (beside the server round trip measured in the same run)\n\n");
        out.push_str(&markdown_table(&performance.table));
        for (number, note) in performance.footnotes.iter().enumerate() {
            let _ = writeln!(out, "\n[{}] {}", number + 1, escape_markdown(note));
        }
    }
    out.push_str("\n## Properties (as each backend describes itself)\n\n");
    out.push_str(&markdown_table(&tables::properties(report)));
    out
}

fn markdown_table(table: &Table) -> String {
    let row = |cells: &[String]| {
        format!("| {} |\n", cells.iter().map(|cell| escape_markdown(cell)).collect::<Vec<_>>().join(" | "))
    };
    let mut out = row(&table.header);
    out.push_str(&format!("|{}\n", "---|".repeat(table.header.len())));
    for cells in &table.rows {
        out.push_str(&row(cells));
    }
    out
}

/// Keeps a cell one cell and plain text: `|` would end it, a line break the row, `<` open HTML.
fn escape_markdown(text: &str) -> String {
    text.replace('\\', "\\\\").replace('|', "\\|").replace('<', "&lt;").replace(['\n', '\r'], " ")
}

/// Writes `report.json`, `report.md` and `report.html` into `dir` (created if absent).
///
/// # Errors
/// When the directory or a file cannot be written.
pub fn write_all(report: &Report, dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(report).map_err(|e| format!("report.json: {e}"))?;
    for (name, text) in
        [("report.json", json), ("report.md", markdown(report)), ("report.html", html::page(report)?)]
    {
        let path = dir.join(name);
        fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    }
    Ok(())
}
