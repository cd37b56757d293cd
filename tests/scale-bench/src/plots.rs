//! SVG plots of a sweep against N, one line per controller: convergence
//! time, and RSS after convergence. Drawn with `plotters`' SVG backend only
//! (its built-in text layout; no fonts or system libraries needed).

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;

use crate::controllers::ControllerKind;
use crate::scenario::RunResult;

/// One plotted quantity.
pub struct Quantity {
    /// Chart title.
    pub title: &'static str,
    /// Y axis label.
    pub y_label: &'static str,
    /// The value of a run.
    pub value: fn(&RunResult) -> f64,
}

/// Convergence time against N.
pub const CONVERGENCE: Quantity = Quantity {
    title: "Convergence time (first create to all objects converged)",
    y_label: "seconds",
    value: |r| r.converge_secs,
};

/// RSS after convergence against N.
pub const RSS: Quantity = Quantity {
    title: "Controller RSS after convergence",
    y_label: "MiB",
    value: |r| r.rss_converged_mib,
};

fn colour(kind: ControllerKind) -> RGBColor {
    match kind {
        ControllerKind::Host => RGBColor(0x1f, 0x77, 0xb4),
        ControllerKind::KubeRs => RGBColor(0x2c, 0xa0, 0x2c),
        ControllerKind::HostPython => RGBColor(0x94, 0x67, 0xbd),
        ControllerKind::HostPythonNoTurns => RGBColor(0xc5, 0xb0, 0xd5),
        ControllerKind::HostJs => RGBColor(0xff, 0x7f, 0x0e),
        ControllerKind::HostGo => RGBColor(0x17, 0xbe, 0xcf),
        ControllerKind::HostBaseline => RGBColor(0x7f, 0x7f, 0x7f),
        ControllerKind::ControllerRuntime => RGBColor(0xd6, 0x27, 0x28),
        ControllerKind::HostSilent => RGBColor(0xae, 0xc7, 0xe8),
        ControllerKind::HostDebug => RGBColor(0x08, 0x30, 0x6b),
        ControllerKind::Floor => RGBColor(0x00, 0x00, 0x00),
    }
}

/// The SVG text of `quantity` against N for `results`.
pub fn svg(results: &[RunResult], quantity: &Quantity) -> Result<String> {
    let mut series: BTreeMap<ControllerKind, Vec<(f64, f64)>> = BTreeMap::new();
    // One line per controller: runs of several replicas are in the tables only.
    let results: Vec<&RunResult> = results.iter().filter(|r| r.replicas <= 1).collect();
    for r in &results {
        series
            .entry(r.controller)
            .or_default()
            .push((r.objects as f64, (quantity.value)(r)));
    }
    for points in series.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xs = results.iter().map(|r| r.objects as f64);
    let x_min = xs.clone().fold(f64::INFINITY, f64::min);
    let x_max = xs.fold(0.0, f64::max);
    let y_max = results
        .iter()
        .map(|r| (quantity.value)(r))
        .fold(0.0, f64::max);
    if results.is_empty() || !x_min.is_finite() {
        return Err(anyhow!("nothing to plot"));
    }
    // A log axis spanning the sweep, with some room either side.
    let x_range = ((x_min / 1.5)..(x_max * 1.5)).log_scale();

    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(quantity.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(x_range, 0.0..(y_max * 1.15).max(1e-9))
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("N (Jinghzhus)")
            .y_desc(quantity.y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .max_light_lines(2)
            .draw()
            .map_err(draw_error)?;
        for (kind, points) in &series {
            let style = colour(*kind);
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    style.stroke_width(2),
                ))
                .map_err(draw_error)?
                .label(kind.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], style.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, style.filled())),
                )
                .map_err(draw_error)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_error)?;
        root.present().map_err(draw_error)?;
    }
    Ok(text)
}

fn draw_error<E: std::fmt::Debug>(err: E) -> anyhow::Error {
    anyhow!("drawing the plot: {err:?}")
}
