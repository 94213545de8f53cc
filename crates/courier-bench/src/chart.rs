//! The charts (SVG, plotters). The scale chart: drain rate and claim round
//! trip against stores registered ([`scale_svg`]). The fairness chart: on the left the quiet stores' p95 per
//! scenario, fair next to FIFO, with the target line; on the right the quiet
//! stores' p95 over time in the bulk scenario, with the bursts marked. Both
//! latency axes are logarithmic, so FIFO's harm and fair's flatness show on
//! one scale. The matrix chart: each cell's judged figures against their
//! target lines ([`write_matrix`]).

use crate::fairness::{
    claim_name, FairnessReport, BASELINE_VS_FIFO_MAX, FAIR_RATIO_MAX, TREND_MAX,
};
use crate::matrix::MatrixReport;
use crate::scale::{ScaleReport, ScaleRow};
use crate::schedule::Scenario;
use crate::BenchError;
use courier_store::ClaimMode;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

const FAIR: RGBColor = RGBColor(31, 119, 180);
const FIFO: RGBColor = RGBColor(214, 39, 40);
const TARGET: RGBColor = RGBColor(120, 120, 120);
const BURST: RGBColor = RGBColor(255, 150, 0);
const GRID_LIGHT: RGBColor = RGBColor(242, 242, 242);
const GRID_BOLD: RGBColor = RGBColor(215, 215, 215);

/// Draws the series' legend at `position`.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(|x| x.to_string())
}

/// Whitens `root`, writes `title` on its top line, and answers the rest.
fn titled<'a>(
    root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    title: String,
) -> Result<DrawingArea<SVGBackend<'a>, plotters::coord::Shift>, String> {
    root.fill(&WHITE).map_err(|x| x.to_string())?;
    let (top, body) = root.split_vertically(34);
    top.draw(&Text::new(title, (14, 10), ("sans-serif", 16).into_font()))
        .map_err(|x| x.to_string())?;
    Ok(body)
}

fn color(c: ClaimMode) -> RGBColor {
    match c {
        ClaimMode::Fair => FAIR,
        ClaimMode::Fifo => FIFO,
    }
}

/// Draws a fairness run's chart at `path` and records where in the report.
/// (The runs return reports; the charts are drawn from them afterwards, so
/// this module depends on the runs' reports and never the reverse.)
pub fn write_fairness(report: &mut FairnessReport, path: &Path) -> Result<(), BenchError> {
    fairness_svg(report, path)?;
    report.chart = Some(path.to_path_buf());
    Ok(())
}

/// Draws a scale run's chart at `path` and records where in the report.
pub fn write_scale(report: &mut ScaleReport, path: &Path) -> Result<(), BenchError> {
    scale_svg(report, path)?;
    report.chart = Some(path.to_path_buf());
    Ok(())
}

/// Writes the chart to `path` (an `.svg` file).
pub fn fairness_svg(report: &FairnessReport, path: &Path) -> Result<(), BenchError> {
    let out = |e: String| BenchError::Output {
        path: path.to_path_buf(),
        detail: e,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| out(e.to_string()))?;
    }
    draw(report, path).map_err(out)
}

fn draw(report: &FairnessReport, path: &Path) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (1160, 470)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (title, body) = root.split_vertically(34);
    let s = &report.settings;
    title
        .draw(&Text::new(
            format!(
                "Quiet stores' p95 latency, enqueue to accepted · {} stores, {} noisy at {}x · {} workers x {} · seed {}",
                s.stores,
                s.noisy_stores,
                s.noise_factor,
                s.calibration.workers,
                s.calibration.concurrency,
                report.seed
            ),
            (14, 10),
            ("sans-serif", 16).into_font(),
        ))
        .map_err(|x| e(&x))?;
    let (left, right) = body.split_horizontally(540);
    bars(report, &left)?;
    timeline(report, &right)?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The bounds of a log axis around `values` (positive), with some room.
fn log_bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() || hi <= 0.0 {
        return (1.0, 10.0);
    }
    (lo / 1.6, (hi * 2.2).max(lo * 2.0))
}

fn bars(
    report: &FairnessReport,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let base = report
        .run(Scenario::Baseline, ClaimMode::Fair)
        .map_or(f64::NAN, |r| r.quiet.p95_ms);
    let (lo, hi) = log_bounds(
        report
            .runs
            .iter()
            .map(|r| r.quiet.p95_ms)
            .chain([base * FAIR_RATIO_MAX]),
    );
    let mut chart = ChartBuilder::on(area)
        .caption("p95 per scenario (lower is better)", ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..3f64, (lo..hi).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .y_desc("ms (log)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, scenario) in Scenario::ALL.into_iter().enumerate() {
        let x = i as f64;
        let label = report
            .run(scenario, ClaimMode::Fair)
            .or_else(|| report.run(scenario, ClaimMode::Fifo))
            .map_or_else(String::new, |r| r.label.clone());
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((x + 0.5, lo))
                    + Text::new(
                        label.clone(),
                        (-(label.len() as i32) * 3, 8),
                        ("sans-serif", 13).into_font(),
                    ),
            ))
            .map_err(|x| e(&x))?;
        scenario_bars(&mut chart, report, scenario, x, lo, i == 0)?;
    }
    if base.is_finite() {
        let target = base * FAIR_RATIO_MAX;
        chart
            .draw_series(LineSeries::new(
                [(0.0, target), (3.0, target)],
                TARGET.stroke_width(1),
            ))
            .map_err(|x| e(&x))?
            .label(format!("target: fair baseline x {FAIR_RATIO_MAX:.2}"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], TARGET));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

/// One scenario's bars, fair next to FIFO, each with its p95 and ratio
/// over it; the legend entries come from the first scenario's.
fn scenario_bars<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, LogCoord<f64>>>,
    report: &FairnessReport,
    scenario: Scenario,
    x: f64,
    lo: f64,
    legend: bool,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    for (j, claim) in [ClaimMode::Fair, ClaimMode::Fifo].into_iter().enumerate() {
        let Some(run) = report.run(scenario, claim) else {
            continue;
        };
        let x0 = x + 0.12 + 0.38 * j as f64;
        let x1 = x0 + 0.36;
        let v = run.quiet.p95_ms.max(lo);
        let series = chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, lo), (x1, v)],
                color(claim).filled(),
            )))
            .map_err(|x| e(&x))?;
        if legend {
            series.label(claim_name(claim)).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color(claim).filled())
            });
        }
        // Two short lines centred over the bar: the p95, then the ratio.
        let mut lines = vec![format!("{:.0} ms", run.quiet.p95_ms)];
        if run.quiet_p95_ratio.is_finite() {
            lines.push(format!("{:.2}x", run.quiet_p95_ratio));
        }
        let n = lines.len() as i32;
        for (k, line) in lines.into_iter().enumerate() {
            let dx = -(line.len() as i32) * 3;
            let dy = -14 * (n - k as i32) - 2;
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at(((x0 + x1) / 2.0, v))
                        + Text::new(line, (dx, dy), ("sans-serif", 11).into_font()),
                ))
                .map_err(|x| e(&x))?;
        }
    }
    Ok(())
}

fn timeline(
    report: &FairnessReport,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let runs: Vec<_> = [ClaimMode::Fair, ClaimMode::Fifo]
        .into_iter()
        .filter_map(|c| report.run(Scenario::Bulk, c))
        .collect();
    let (lo, hi) = log_bounds(
        runs.iter()
            .flat_map(|r| r.timeline.iter().map(|p| p.p95_ms)),
    );
    let t_max = runs
        .iter()
        .flat_map(|r| r.timeline.iter().map(|p| p.t_s + 1.0))
        .fold(report.settings.duration_s as f64, f64::max);
    let caption = runs
        .first()
        .map_or_else(|| "bulk".to_string(), |r| r.label.clone());
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{caption}: quiet stores' p95 over time"),
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..t_max, (lo..hi).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("enqueued at (s)")
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .y_desc("ms (log)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| e(&x))?;
    if let Some(first) = runs.first() {
        for (k, b) in first.bursts_s.iter().enumerate() {
            let series = chart
                .draw_series(LineSeries::new([(*b, lo), (*b, hi)], BURST.stroke_width(2)))
                .map_err(|x| e(&x))?;
            if k == 0 {
                series.label("burst enqueued").legend(|(x, y)| {
                    PathElement::new([(x + 6, y - 6), (x + 6, y + 6)], BURST.stroke_width(2))
                });
            }
        }
    }
    for run in &runs {
        let c = color(run.claim);
        chart
            .draw_series(LineSeries::new(
                run.timeline.iter().map(|p| (p.t_s, p.p95_ms.max(lo))),
                c.stroke_width(2),
            ))
            .map_err(|x| e(&x))?
            .label(claim_name(run.claim))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// Writes the scale chart to `path` (an `.svg` file): on the left the drain
/// rate against stores registered (log), on the right the claim's round
/// trip p50 and p99; the row with many active stores is a separate point.
pub fn scale_svg(report: &ScaleReport, path: &Path) -> Result<(), BenchError> {
    let out = |e: String| BenchError::Output {
        path: path.to_path_buf(),
        detail: e,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| out(e.to_string()))?;
    }
    draw_scale(report, path).map_err(out)
}

fn draw_scale(report: &ScaleReport, path: &Path) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (1160, 440)).into_drawing_area();
    let title = format!(
        "Fair claim against stores registered · {} claimers, claims of {} · seed {}",
        report.claimers, report.claim_batch_max, report.seed
    );
    let body = titled(&root, title)?;
    let (left, right) = body.split_horizontally(580);
    let first_active = report.rows.first().map_or(0, |r| r.active);
    let (line, many): (Vec<&ScaleRow>, Vec<&ScaleRow>) = report
        .rows
        .iter()
        .partition(|r| r.active == first_active && r.scheduled == 0);
    let rate = |r: &ScaleRow| r.drain_per_s;
    scale_panel(
        &left,
        "drained per s",
        &line,
        &many,
        &[("drain rate", rate, FAIR)],
    )?;
    let p50 = |r: &ScaleRow| r.claim.p50_ms;
    let p99 = |r: &ScaleRow| r.claim.p99_ms;
    scale_panel(
        &right,
        "claim round trip, ms (log)",
        &line,
        &many,
        &[("claim p50", p50, FAIR), ("claim p99", p99, FIFO)],
    )?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

type Figure = (&'static str, fn(&ScaleRow) -> f64, RGBColor);

fn scale_panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    y_desc: &str,
    line: &[&ScaleRow],
    many: &[&ScaleRow],
    figures: &[Figure],
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let all = line.iter().chain(many);
    let x_hi = all
        .clone()
        .map(|r| f64::from(r.registered))
        .fold(10.0, f64::max)
        * 3.0;
    let x_lo = all
        .clone()
        .map(|r| f64::from(r.registered))
        .fold(f64::INFINITY, f64::min)
        / 3.0;
    let (lo, hi) = log_bounds(all.flat_map(|r| figures.iter().map(move |f| (f.1)(r))));
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d((x_lo..x_hi).log_scale(), (lo..hi).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .x_desc("stores registered (log)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.1}"))
        .draw()
        .map_err(|x| e(&x))?;
    for &(name, f, c) in figures {
        let points: Vec<(f64, f64)> = line
            .iter()
            .map(|r| (f64::from(r.registered), f(r)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(format!(
                "{name}, {} active",
                line.first().map_or(0, |r| r.active)
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))
            .map_err(|x| e(&x))?;
        for r in many {
            chart
                .draw_series(std::iter::once(TriangleMarker::new(
                    (f64::from(r.registered), f(r)),
                    7,
                    c.filled(),
                )))
                .map_err(|x| e(&x))?
                .label(if r.scheduled > 0 {
                    format!("{name}, {} active, {} scheduled", r.active, r.scheduled)
                } else {
                    format!("{name}, {} active", r.active)
                })
                .legend(move |(x, y)| TriangleMarker::new((x + 6, y), 6, c.filled()));
        }
    }
    legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
    Ok(())
}

/// Draws a matrix's chart at `path` and records where in the report.
pub fn write_matrix(report: &mut MatrixReport, path: &Path) -> Result<(), BenchError> {
    let out = |e: String| BenchError::Output {
        path: path.to_path_buf(),
        detail: e,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| out(e.to_string()))?;
    }
    draw_matrix(report, path).map_err(out)?;
    report.chart = Some(path.to_path_buf());
    Ok(())
}

/// The matrix chart: one column per cell, each judged figure as a marker
/// against its target line (the noisy scenarios' ratios against 1.10x, the
/// fair baseline over FIFO's and the worst trend against 1.2x); an
/// overloaded cell is shaded and its markers left out. A figure above the
/// axis is drawn at its top.
fn draw_matrix(report: &MatrixReport, path: &Path) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (1160, 500)).into_drawing_area();
    let title = format!(
        "Fairness matrix · {} of {} judged cells met every target, {} overloaded · {} round(s) of {} s · seed {}",
        report.met,
        report.judged,
        report.overloaded,
        report.rounds,
        report.duration_s,
        report.seed
    );
    let body = titled(&root, title)?;
    const Y_MAX: f64 = 2.0;
    let n = report.cells.len().max(1);
    let labels: Vec<String> = report
        .cells
        .iter()
        .map(|c| {
            format!(
                "{}x{}x{}",
                c.cell.stores, c.cell.noisy_stores, c.cell.noise_factor
            )
        })
        .collect();
    let mut chart = ChartBuilder::on(&body)
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n as f64, 0.6f64..Y_MAX)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .y_desc("ratio (lines: 1.10x noisy scenarios; 1.2x baseline vs FIFO, trend)")
        .y_label_formatter(&|v| format!("{v:.1}x"))
        .draw()
        .map_err(|x| e(&x))?;
    matrix_cells(&mut chart, report, &labels, Y_MAX)?;
    matrix_figures(&mut chart, report, Y_MAX)?;
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

type Linear<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Each cell's column (shaded when overloaded) and label, and the target
/// lines.
fn matrix_cells<'a, DB: DrawingBackend + 'a>(
    chart: &mut Linear<'a, DB>,
    report: &MatrixReport,
    labels: &[String],
    y_max: f64,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let n = report.cells.len().max(1);
    for (i, c) in report.cells.iter().enumerate() {
        let x = i as f64;
        if c.overloaded.is_some() {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x, 0.6), (x + 1.0, y_max)],
                    GRID_BOLD.mix(0.6).filled(),
                )))
                .map_err(|x| e(&x))?;
        }
        let label = &labels[i];
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((x + 0.5, 0.6))
                    + Text::new(
                        label.clone(),
                        (4, 6),
                        ("sans-serif", 11)
                            .into_font()
                            .transform(FontTransform::Rotate90),
                    ),
            ))
            .map_err(|x| e(&x))?;
    }
    // The trend's target and the baseline's over FIFO's are one line when equal.
    for (target, style) in [
        (FAIR_RATIO_MAX, TARGET.stroke_width(1)),
        (TREND_MAX, TARGET.stroke_width(2)),
        (BASELINE_VS_FIFO_MAX, TARGET.stroke_width(2)),
    ] {
        chart
            .draw_series(LineSeries::new([(0.0, target), (n as f64, target)], style))
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

/// Each judged figure of each cell that was not overloaded, as a marker.
fn matrix_figures<'a, DB: DrawingBackend + 'a>(
    chart: &mut Linear<'a, DB>,
    report: &MatrixReport,
    y_max: f64,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    type Pick = fn(&FairnessReport) -> f64;
    fn ratio_of(r: &FairnessReport, s: Scenario) -> f64 {
        r.run(s, ClaimMode::Fair)
            .map_or(f64::NAN, |x| x.quiet_p95_ratio)
    }
    let figures: [(&str, Pick, RGBColor, f64); 4] = [
        (
            "steady (fair) / fair baseline",
            |r| ratio_of(r, Scenario::Steady),
            FAIR,
            0.2,
        ),
        (
            "bulk (fair) / fair baseline",
            |r| ratio_of(r, Scenario::Bulk),
            BURST,
            0.4,
        ),
        (
            "fair baseline / FIFO baseline",
            |r| r.verdict.baseline_vs_fifo,
            FIFO,
            0.6,
        ),
        (
            "worst fair round, last third / first",
            |r| r.verdict.fair_trend_worst,
            TARGET,
            0.8,
        ),
    ];
    for (name, pick, colour, dx) in figures {
        let points: Vec<(f64, f64)> = report
            .cells
            .iter()
            .enumerate()
            .filter(|(_, c)| c.overloaded.is_none())
            .filter_map(|(i, c)| Some((i as f64 + dx, pick(c.report.as_ref()?))))
            .filter(|(_, v)| v.is_finite())
            .map(|(x, v)| (x, v.clamp(0.6, y_max)))
            .collect();
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, colour.filled())),
            )
            .map_err(|x| e(&x))?
            .label(name)
            .legend(move |(x, y)| Circle::new((x + 6, y), 4, colour.filled()));
    }
    Ok(())
}
