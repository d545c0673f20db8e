//! The report's charts, drawn by plotters into SVG strings the HTML page inlines: throughput per
//! kind (W1 and W3, log scale) and the distribution of W2's cross-worker hand-offs per kind.

use plotters::prelude::*;

use crate::compare::report::Report;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 420;

/// W1 and W3 pairs per second per kind, as bars on a log scale (in-process and network kinds
/// differ by three orders of magnitude). `None` without workload results.
pub fn throughput(report: &Report) -> Result<Option<String>, String> {
    let bars: Vec<(&str, Option<f64>, Option<f64>)> = report
        .kinds
        .iter()
        .filter_map(|kind| {
            let performance = kind.performance.as_ref()?;
            let w1 = performance.w1.as_ref().map(|w1| w1.pairs_per_s);
            let w3 = performance.w3.as_ref().map(|w3| w3.pairs_per_s);
            (w1.is_some() || w3.is_some()).then_some((kind.name, w1, w3))
        })
        .collect();
    if bars.is_empty() {
        return Ok(None);
    }
    let top = bars.iter().flat_map(|(_, w1, w3)| [*w1, *w3]).flatten().fold(10.0, f64::max) * 3.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("Throughput: W1 (one worker) and W3 (8 workers, 8 names), pairs/s", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..bars.len() as f64, (1f64..top).log_scale())
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_desc("pairs/s (log)")
            .y_label_formatter(&|value| format!("{value:.0}"))
            .draw()
            .map_err(chart_error)?;
        for (series, offset, color) in [("W1", 0.1, BLUE.mix(0.7)), ("W3", 0.52, RED.mix(0.6))] {
            let rectangles = bars.iter().enumerate().filter_map(|(index, (_, w1, w3))| {
                let value = if series == "W1" { *w1 } else { *w3 }?;
                let x = index as f64 + offset;
                Some(Rectangle::new([(x, 1.0), (x + 0.38, value.max(1.0))], color.filled()))
            });
            chart
                .draw_series(rectangles)
                .map_err(chart_error)?
                .label(series)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        }
        let names = bars.iter().enumerate().map(|(index, (name, ..))| {
            Text::new((*name).to_owned(), (index as f64 + 0.1, 1.3), ("sans-serif", 13).into_font())
        });
        chart.draw_series(names).map_err(chart_error)?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(chart_error)?;
        root.present().map_err(chart_error)?;
    }
    Ok(Some(svg))
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

fn chart_error(error: impl std::fmt::Display) -> String {
    format!("drawing a chart: {error}")
}
