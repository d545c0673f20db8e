//! The report's charts, drawn by plotters into SVG strings the HTML page inlines: throughput per
//! kind (W1 and W3) and the distribution of W2's cross-worker hand-offs per kind.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::compare::report::Report;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 420;
/// One kind's row in the throughput chart (two bars), and what a panel needs beyond its rows
/// (caption, x axis).
const ROW: u32 = 34;
const PANEL_EXTRA: u32 = 80;
/// Room left of the bars for the kinds' names.
const NAMES: u32 = 120;

/// One kind's throughput bars.
struct Bars<'a> {
    name: &'a str,
    w1: Option<f64>,
    w3: Option<f64>,
}

/// W1 and W3 pairs per second per kind as horizontal bars (a name per row, so eleven kinds never
/// overlap), in two panels with a linear scale each: in-process kinds run about a thousand times
/// faster than kinds with a server, and on one scale they would flatten every server kind.
/// `None` without workload results.
pub fn throughput(report: &Report) -> Result<Option<String>, String> {
    let (mut in_process, mut served) = (Vec::new(), Vec::new());
    for kind in &report.kinds {
        let Some(performance) = kind.performance.as_ref() else { continue };
        let bars = Bars {
            name: kind.name,
            w1: performance.w1.as_ref().map(|w1| w1.pairs_per_s),
            w3: performance.w3.as_ref().map(|w3| w3.pairs_per_s),
        };
        if bars.w1.is_none() && bars.w3.is_none() {
            continue;
        }
        if performance.round_trip_description.is_none() { &mut in_process } else { &mut served }.push(bars);
    }
    let panels: Vec<(&str, &[Bars<'_>])> = [
        ("in process", in_process.as_slice()),
        ("with a server: every pair takes round trips", served.as_slice()),
    ]
    .into_iter()
    .filter(|(_, bars)| !bars.is_empty())
    .collect();
    if panels.is_empty() {
        return Ok(None);
    }
    let heights: Vec<u32> = panels.iter().map(|(_, bars)| bars.len() as u32 * ROW + PANEL_EXTRA).collect();
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH, 40 + heights.iter().sum::<u32>())).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut rest = root
            .titled("Throughput: W1 (one worker) and W3 (8 workers, 8 names), pairs/s", ("sans-serif", 18))
            .map_err(chart_error)?;
        for (index, ((title, bars), height)) in panels.iter().zip(&heights).enumerate() {
            let (panel, below) = rest.split_vertically(*height);
            // One legend, in the last panel.
            throughput_panel(&root, &panel, title, bars, index + 1 == panels.len())?;
            rest = below;
        }
        root.present().map_err(chart_error)?;
    }
    Ok(Some(svg))
}

/// One panel of [`throughput`]: a row per kind, W1's bar above W3's, each with its value; the
/// names are drawn on `root` left of the rows.
fn throughput_panel(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    bars: &[Bars<'_>],
    legend: bool,
) -> Result<(), String> {
    let rows = bars.len() as f64;
    // Room right of the longest bar for its value (and the legend).
    let top = bars.iter().flat_map(|bars| [bars.w1, bars.w3]).flatten().fold(1.0, f64::max) * 1.25;
    let mut chart = ChartBuilder::on(panel)
        .caption(title, ("sans-serif", 15))
        .margin(8)
        .margin_right(24)
        .x_label_area_size(30)
        .y_label_area_size(NAMES)
        .build_cartesian_2d(0f64..top, 0f64..rows)
        .map_err(chart_error)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(8)
        .x_label_style(("sans-serif", 12))
        .x_label_formatter(&|&value| short_number(value))
        .draw()
        .map_err(chart_error)?;
    // Row `index` spans y from `rows - index` (its top) down one unit.
    for (series, from, to, color) in [("W1", 0.12, 0.47, BLUE.mix(0.7)), ("W3", 0.53, 0.88, RED.mix(0.6))] {
        let value = |bars: &Bars<'_>| if series == "W1" { bars.w1 } else { bars.w3 };
        let rectangles = bars.iter().enumerate().filter_map(|(index, bars)| {
            let row_top = rows - index as f64;
            Some(Rectangle::new([(0.0, row_top - from), (value(bars)?, row_top - to)], color.filled()))
        });
        chart
            .draw_series(rectangles)
            .map_err(chart_error)?
            .label(series)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        let numbers = bars.iter().enumerate().filter_map(|(index, bars)| {
            let value = value(bars)?;
            let y = rows - index as f64 - (from + to) / 2.0;
            let style =
                TextStyle::from(("sans-serif", 11).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
            Some(Text::new(format!(" {value:.0}"), (value, y), style))
        });
        chart.draw_series(numbers).map_err(chart_error)?;
    }
    if legend {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(chart_error)?;
    }
    let name_style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (index, bars) in bars.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, rows - index as f64 - 0.5));
        root.draw(&Text::new(bars.name.to_owned(), (x - 8, y), name_style.clone())).map_err(chart_error)?;
    }
    Ok(())
}

/// The cumulative distribution of W2's cross-worker hand-off latencies, one line per kind, on a
/// log scale of microseconds. `None` without W2 results.
pub fn handoffs(report: &Report) -> Result<Option<String>, String> {
    let series: Vec<(&str, Vec<f64>)> = report
        .kinds
        .iter()
        .filter_map(|kind| {
            let w2 = kind.performance.as_ref()?.w2.as_ref()?;
            let mut micros: Vec<f64> = w2.handoffs_ns.iter().map(|&ns| (ns as f64 / 1e3).max(0.1)).collect();
            micros.sort_by(f64::total_cmp);
            (!micros.is_empty()).then_some((kind.name, micros))
        })
        .collect();
    if series.is_empty() {
        return Ok(None);
    }
    let low = series.iter().map(|(_, m)| m[0]).fold(f64::INFINITY, f64::min).max(0.1);
    let high = series.iter().map(|(_, m)| m[m.len() - 1]).fold(1.0, f64::max) * 1.5;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("W2 hand-off latency: share of hand-offs at most x µs", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((low * 0.8..high).log_scale(), 0f64..1f64)
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .x_desc("µs from a release to the next worker's acquisition (log)")
            .y_desc("share")
            .draw()
            .map_err(chart_error)?;
        for (index, (name, micros)) in series.iter().enumerate() {
            let color = Palette99::pick(index).to_rgba();
            let count = micros.len() as f64;
            let points = micros.iter().enumerate().map(|(i, &x)| (x, (i + 1) as f64 / count));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(chart_error)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(chart_error)?;
        root.present().map_err(chart_error)?;
    }
    Ok(Some(svg))
}

/// An axis label: `950`, `40k`, `1.2M`.
fn short_number(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.1}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.0}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

fn chart_error(error: impl std::fmt::Display) -> String {
    format!("drawing a chart: {error}")
}
