//! The soak's chart: table and index bytes, the claim p99 and the workers'
//! resident memory over time, one panel each, with the thirds marked.

use crate::soak::{SoakReport, SoakSample};
use crate::BenchError;
use plotters::prelude::*;
use std::path::Path;

pub fn draw(report: &SoakReport, path: &Path) -> Result<(), BenchError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    panels(report, path).map_err(|detail| BenchError::Output {
        path: path.to_path_buf(),
        detail,
    })
}

type Pick = fn(&SoakSample) -> Option<f64>;

fn panels(report: &SoakReport, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((3, 1));
    let picks: [(&str, Pick); 3] = [
        ("tables + indexes (MB)", |s| Some(s.tables_mb)),
        ("claim p99 (ms)", |s| s.claim_p99_ms),
        ("worker RSS (MB, mean per worker)", |s| {
            Some(s.worker_rss_mb)
        }),
    ];
    let span = report.samples.iter().map(|s| s.t_s).fold(0.0, f64::max);
    for (area, (title, pick)) in areas.iter().zip(picks) {
        panel(report, area, title, pick, span)?;
    }
    root.present().map_err(|e| e.to_string())
}

fn panel(
    report: &SoakReport,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    pick: Pick,
    span: f64,
) -> Result<(), String> {
    let points: Vec<(f64, f64)> = report
        .samples
        .iter()
        .filter_map(|s| pick(s).map(|v| (s.t_s, v)))
        .collect();
    let t_min = points.iter().map(|p| p.0).fold(0.0, f64::min);
    let y_max = points.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(t_min..span.max(1.0), 0f64..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("s since the measured span began (before 0: warm-up)")
        .draw()
        .map_err(|e| e.to_string())?;
    for x in [0.0, span / 3.0, span * 2.0 / 3.0] {
        chart
            .draw_series(LineSeries::new([(x, 0.0), (x, y_max)], BLACK.mix(0.3)))
            .map_err(|e| e.to_string())?;
    }
    chart
        .draw_series(LineSeries::new(points, BLUE.stroke_width(2)))
        .map_err(|e| e.to_string())?;
    Ok(())
}
