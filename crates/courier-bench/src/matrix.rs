//! `courier bench fairness --matrix`: fairness at every shape, not only at
//! the one it was tuned for.
//!
//! Each cell is a whole fairness run ([`crate::fairness::run`], its own
//! cluster, calibration, baseline and FIFO comparison) at one shape: stores
//! 100, 1,000 and 10,000, noisy stores 1, 2 and 10, noise 10x and 20x. The
//! baseline's total offered load is the same in every cell (250/s by
//! default), spread over the cell's stores; the capacity of each cell is
//! sized for its noisy scenarios. A cell is judged against every target
//! (`FairnessVerdict::within_targets`) or reported as overloaded, with the
//! reason in figures: its noisy scenarios offer more than this machine was
//! told it carries (`offered_max_hz`), a run did not drain in time, or its
//! fair runs could not keep up with their load.
//!
//! # Invariants
//! - Every cell's baseline offers the same total load.
//! - A cell's ratios are measured within that cell's run.

use crate::fairness::{self, FairnessConfig, FairnessReport, FairnessRun};
use crate::harness::probe::Probes;
use crate::schedule::Scenario;
use crate::BenchError;
use courier_store::ClaimMode;
use serde::Serialize;
use std::time::Instant;

/// At most this many cells of the full matrix may be reported as overloaded.
pub const OVERLOADED_CELLS_MAX: usize = 2;
/// A fair run keeps up when it accepts at least this share of its offered
/// rate and keeps its workers at most this busy.
const KEEPS_UP_SHARE_MIN: f64 = 0.9;
const BUSY_MAX: f64 = 0.85;
/// The machine's CPUs may be at most this busy (every process's time, the
/// median over a run's rounds) in a fair run of a judged cell: beyond it the
/// quiet stores wait for a core, whichever store the claim serves first.
const MACHINE_BUSY_MAX: f64 = 0.85;

/// One shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub stores: u32,
    pub noisy_stores: u32,
    pub noise_factor: u32,
}

impl std::str::FromStr for Cell {
    type Err = String;
    /// `STORESxNOISYxFACTOR`, as `1000x2x20`.
    fn from_str(s: &str) -> Result<Cell, String> {
        let parts: Vec<&str> = s.split('x').collect();
        let n = |i: usize| parts.get(i).and_then(|p| p.parse::<u32>().ok());
        match (parts.len(), n(0), n(1), n(2)) {
            (3, Some(stores), Some(noisy_stores), Some(noise_factor)) => Ok(Cell {
                stores,
                noisy_stores,
                noise_factor,
            }),
            _ => Err(format!(
                "a cell is STORESxNOISYxFACTOR (as 1000x2x20), not {s:?}"
            )),
        }
    }
}

/// The matrix's settings; every cell is `base` with the cell's shape.
#[derive(Debug, Clone)]
pub struct MatrixConfig {
    pub base: FairnessConfig,
    pub cells: Vec<Cell>,
    /// The baseline's total offered load in every cell.
    pub total_rate_hz: f64,
    /// A cell whose noisy scenarios offer more is reported as overloaded
    /// without running.
    pub offered_max_hz: f64,
}

impl MatrixConfig {
    /// The full matrix: 18 cells, 250/s in every baseline, three rounds of
    /// 8 s per run (the first second not measured), a 5 s calibration, a
    /// minute to drain, and no FIFO run of the steady scenario (no target
    /// reads it). A cell's figures are medians over its rounds: one run
    /// slowed by the machine does not decide a cell.
    pub fn new(seed: u64) -> MatrixConfig {
        let mut cells = Vec::new();
        for stores in [100, 1_000, 10_000] {
            for noisy_stores in [1, 2, 10] {
                for noise_factor in [10, 20] {
                    cells.push(Cell {
                        stores,
                        noisy_stores,
                        noise_factor,
                    });
                }
            }
        }
        MatrixConfig {
            base: FairnessConfig {
                duration_s: 8,
                rounds: 3,
                warmup_s: 1,
                calibration_s: 5,
                drain_timeout_s: 60,
                fifo_steady: false,
                // A cell is judged overloaded by the machine's CPU too, and
                // its row shows the sequential scans.
                probes: Probes {
                    cpu: true,
                    scans: true,
                    lateness: false,
                },
                ..FairnessConfig::new(seed)
            },
            cells,
            total_rate_hz: 250.0,
            offered_max_hz: 1_000.0,
        }
    }

    /// The fairness settings of one cell.
    pub fn cell_config(&self, cell: Cell) -> FairnessConfig {
        FairnessConfig {
            stores: cell.stores,
            noisy_stores: cell.noisy_stores,
            noise_factor: cell.noise_factor,
            rate_per_store_hz: self.total_rate_hz / f64::from(cell.stores),
            // Headroom for the noisy stores too: at 100 stores a cap of 1
            // held a noisy store below its rate while the workers sat 24-49%
            // busy, and the cell read as overloaded (the matrix's runs in the
            // git history of docs/benchmarks.md).
            store_cap_sized: true,
            ..self.base.clone()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.cells.is_empty() || self.cells.len() > 64 {
            return Err("--cells takes 1 to 64 cells".into());
        }
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !ok(self.total_rate_hz) || !ok(self.offered_max_hz) {
            return Err("--total-rate and --offered-max must be positive".into());
        }
        for c in &self.cells {
            self.cell_config(*c).validate().map_err(|e| {
                format!(
                    "cell {}x{}x{}: {e}",
                    c.stores, c.noisy_stores, c.noise_factor
                )
            })?;
        }
        Ok(())
    }
}

/// What became of one cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    pub cell: Cell,
    pub rate_per_store_hz: f64,
    /// The noisy scenarios' offered load.
    pub offered_noisy_hz: f64,
    /// Why the cell is not judged (None: judged).
    pub overloaded: Option<String>,
    pub report: Option<FairnessReport>,
    /// The machine's 1-minute load average before and after the cell.
    pub load_before: f64,
    pub load_after: f64,
    pub wall_s: f64,
}

impl CellResult {
    pub fn met(&self) -> bool {
        self.overloaded.is_none()
            && self
                .report
                .as_ref()
                .is_some_and(|r| r.verdict.within_targets)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MatrixReport {
    pub seed: u64,
    pub total_rate_hz: f64,
    pub duration_s: u64,
    pub rounds: u32,
    pub cells: Vec<CellResult>,
    pub overloaded: usize,
    pub judged: usize,
    pub met: usize,
    /// Every judged cell met every target, and at most
    /// [`OVERLOADED_CELLS_MAX`] were overloaded.
    pub within_targets: bool,
    pub wall_time_s: f64,
    /// Where the chart was written, once it was.
    pub chart: Option<std::path::PathBuf>,
}

/// Runs every cell in order.
pub async fn run(m: &MatrixConfig) -> Result<MatrixReport, BenchError> {
    m.validate().map_err(BenchError::Settings)?;
    let started = Instant::now();
    let mut cells = Vec::new();
    for (i, cell) in m.cells.iter().enumerate() {
        let cfg = m.cell_config(*cell);
        let offered = cfg.calibration().map_err(BenchError::Settings)?.offered_hz;
        if cfg.progress {
            eprintln!(
                "[cell {}/{}] {} stores, {} noisy at {}x: {:.3}/s per store, {offered:.0}/s offered in the noisy scenarios",
                i + 1,
                m.cells.len(),
                cell.stores,
                cell.noisy_stores,
                cell.noise_factor,
                cfg.rate_per_store_hz
            );
        }
        cells.push(one_cell(m, *cell, &cfg, offered).await?);
    }
    let overloaded = cells.iter().filter(|c| c.overloaded.is_some()).count();
    let met = cells.iter().filter(|c| c.met()).count();
    let judged = cells.len() - overloaded;
    Ok(MatrixReport {
        seed: m.base.seed,
        total_rate_hz: m.total_rate_hz,
        duration_s: m.base.duration_s,
        rounds: m.base.rounds,
        overloaded,
        judged,
        met,
        within_targets: met == judged && overloaded <= OVERLOADED_CELLS_MAX,
        cells,
        wall_time_s: started.elapsed().as_secs_f64(),
        chart: None,
    })
}

async fn one_cell(
    m: &MatrixConfig,
    cell: Cell,
    cfg: &FairnessConfig,
    offered: f64,
) -> Result<CellResult, BenchError> {
    let started = Instant::now();
    let load_before = crate::cpu::load_average_1m();
    let mut result = CellResult {
        cell,
        rate_per_store_hz: cfg.rate_per_store_hz,
        offered_noisy_hz: offered,
        overloaded: None,
        report: None,
        load_before,
        load_after: f64::NAN,
        wall_s: 0.0,
    };
    if offered > m.offered_max_hz {
        result.overloaded = Some(format!(
            "its noisy scenarios offer {offered:.0}/s, above the {:.0}/s this machine was set to carry (--offered-max)",
            m.offered_max_hz
        ));
    } else {
        match fairness::run(cfg).await {
            Ok(report) => {
                result.overloaded = overload_reason(&report.runs);
                result.report = Some(report);
            }
            Err(BenchError::Timeout {
                what,
                limit,
                detail,
            }) => {
                result.overloaded =
                    Some(format!("{what} did not drain within {limit:?} ({detail})"));
            }
            Err(e) => return Err(e),
        }
    }
    result.load_after = crate::cpu::load_average_1m();
    result.wall_s = started.elapsed().as_secs_f64();
    Ok(result)
}

/// Why a cell's figures measure a queue rather than fairness, if they do:
/// a fair run kept its workers more than 85% busy, or the machine's CPUs
/// more than 85% busy (the server, the workers, the provider and the load
/// share one machine, so the quiet stores then queue for a core, not for a
/// slot), or a fair run of Poisson
/// arrivals (the baseline, the steady scenario) accepted less than 90% of
/// its offered rate. A bulk run's accepted rate is no such sign: its bursts
/// are larger than the capacity by design, and the per-store cap drains
/// them at its own pace after the load has ended (a cell whose workers sat
/// 50% busy while a noisy store's burst drained at its cap was once
/// reported overloaded), so the bulk scenario is judged by how busy it kept
/// the workers, and by its drain.
fn overload_reason(runs: &[FairnessRun]) -> Option<String> {
    runs.iter()
        .filter(|run| run.claim == ClaimMode::Fair)
        .find(|run| {
            let arrivals_kept_up = run.scenario == Scenario::Bulk
                || run.throughput_per_s >= KEEPS_UP_SHARE_MIN * run.offered_per_s;
            let machine_busy = run.machine_busy_share().unwrap_or(0.0);
            !arrivals_kept_up
                || run.utilisation_measured > BUSY_MAX
                || machine_busy > MACHINE_BUSY_MAX
        })
        .map(|run| {
            format!(
                "fair, {}: accepted {:.0}/s of {:.0}/s offered, workers {:.0}% busy, the machine's CPUs {}",
                run.label,
                run.throughput_per_s,
                run.offered_per_s,
                run.utilisation_measured * 100.0,
                run.machine_busy_share()
                    .map_or("not read".to_string(), |b| format!("{:.0}% busy", b * 100.0))
            )
        })
}

impl MatrixReport {
    /// One row per cell, then the verdict.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} cells · baseline {:.0}/s in every cell · {} s per run, {} round(s) · ratios within each cell's run\n\n",
            self.cells.len(),
            self.total_rate_hz,
            self.duration_s,
            self.rounds
        );
        out.push_str(
            "| stores | noisy | noise | offered noisy /s | slots | store cap | busy | CPUs busy | fair base p95 ms | FIFO base p95 ms | base vs FIFO | steady (fair) | bulk (fair) | bulk (FIFO) | worst trend | actions seq scans/s max | load avg | verdict |\n",
        );
        out.push_str(
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
        );
        for c in &self.cells {
            out.push_str(&row(c));
        }
        out.push_str(&format!(
            "\njudged {} of {} cells (overloaded {}, at most {OVERLOADED_CELLS_MAX}); every target met in {} of {} judged: {}\n",
            self.judged,
            self.cells.len(),
            self.overloaded,
            self.met,
            self.judged,
            if self.within_targets { "met" } else { "NOT met" }
        ));
        for c in self.cells.iter().filter(|c| c.overloaded.is_some()) {
            out.push_str(&format!(
                "overloaded {}x{}x{}: {}\n",
                c.cell.stores,
                c.cell.noisy_stores,
                c.cell.noise_factor,
                c.overloaded.as_deref().unwrap_or("")
            ));
        }
        // Judged cells' rounds that trended, with where they stalled.
        for c in self.cells.iter().filter(|c| c.overloaded.is_none()) {
            let lines = c
                .report
                .as_ref()
                .map(|r| r.trending_lines())
                .unwrap_or_default();
            if !lines.is_empty() {
                out.push_str(&format!(
                    "trending rounds of {}x{}x{}:\n{lines}",
                    c.cell.stores, c.cell.noisy_stores, c.cell.noise_factor
                ));
            }
        }
        out
    }
}

fn row(c: &CellResult) -> String {
    let x = |v: f64| format!("{v:.2}x");
    let (mut figures, mut verdict) = (vec!["-".to_string(); 12], "overloaded".to_string());
    if let Some(r) = &c.report {
        let p95 = |s, m| r.run(s, m).map_or(f64::NAN, |x| x.quiet.p95_ms);
        let ratio = |s, m| r.run(s, m).map_or(f64::NAN, |x| x.quiet_p95_ratio);
        let busy = r
            .run(Scenario::Steady, ClaimMode::Fair)
            .map_or(f64::NAN, |x| x.utilisation_measured * 100.0);
        // The busiest fair run's machine (median over its rounds).
        let cpus = r
            .runs
            .iter()
            .filter(|x| x.claim == ClaimMode::Fair)
            .filter_map(FairnessRun::machine_busy_share)
            .fold(f64::NAN, f64::max);
        let v = &r.verdict;
        figures = vec![
            r.settings.calibration.slots.to_string(),
            r.settings.store_in_flight_max.to_string(),
            format!("{busy:.0}%"),
            if cpus.is_nan() {
                "-".to_string()
            } else {
                format!("{:.0}%", cpus * 100.0)
            },
            format!("{:.1}", p95(Scenario::Baseline, ClaimMode::Fair)),
            format!("{:.1}", p95(Scenario::Baseline, ClaimMode::Fifo)),
            x(v.baseline_vs_fifo),
            x(ratio(Scenario::Steady, ClaimMode::Fair)),
            x(ratio(Scenario::Bulk, ClaimMode::Fair)),
            x(ratio(Scenario::Bulk, ClaimMode::Fifo)),
            x(v.fair_trend_worst),
            v.fair_seq_scans
                .map_or("-".to_string(), |s| format!("{:.1}", s.per_s_max)),
        ];
        if c.overloaded.is_none() {
            verdict = if v.within_targets { "met" } else { "NOT met" }.to_string();
        }
    }
    format!(
        "| {} | {} | {}x | {:.0} | {} | {:.2} → {:.2} | {verdict} |\n",
        c.cell.stores,
        c.cell.noisy_stores,
        c.cell.noise_factor,
        c.offered_noisy_hz,
        figures.join(" | "),
        c.load_before,
        c.load_after
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairness::RoundCpu;

    #[test]
    fn the_full_matrix_has_18_valid_cells_with_the_same_baseline_load() {
        let m = MatrixConfig::new(1);
        assert_eq!(m.cells.len(), 18);
        assert_eq!(m.validate(), Ok(()));
        for c in &m.cells {
            let cfg = m.cell_config(*c);
            let base = cfg.rate_per_store_hz * f64::from(cfg.stores);
            assert!((base - 250.0).abs() < 1e-9, "{c:?}: {base}");
        }
    }

    fn fair_run(scenario: Scenario, accepted_share: f64, busy: f64) -> FairnessRun {
        let p = crate::stats::Percentiles {
            count: 10,
            p50_ms: 1.0,
            p95_ms: 2.0,
            p99_ms: 3.0,
            max_ms: 4.0,
        };
        FairnessRun {
            scenario,
            label: format!("{scenario:?}"),
            claim: ClaimMode::Fair,
            quiet: p,
            quiet_wait: None,
            statements: Vec::new(),
            quiet_p95_ratio: 1.0,
            quiet_by_round: vec![p],
            ratio_by_round: vec![1.0],
            trend_by_round: vec![1.0],
            thirds_by_round: Vec::new(),
            seq_scans_per_s_by_round: Vec::new(),
            cpu_by_round: Vec::new(),
            stalls_by_round: Vec::new(),
            noisy: None,
            actions: 1_000,
            offered_per_s: 300.0,
            throughput_per_s: 300.0 * accepted_share,
            utilisation_measured: busy,
            hold_mean_ms: 30.0,
            enqueue_lag_max_ms: 0.0,
            timeline: Vec::new(),
            bursts_s: Vec::new(),
        }
    }

    #[test]
    fn overload_is_workers_too_busy_or_poisson_arrivals_not_kept_up_with() {
        let kept_up = [
            fair_run(Scenario::Baseline, 1.0, 0.5),
            fair_run(Scenario::Steady, 0.95, 0.6),
            // A bulk run whose bursts drain at the cap's pace after the load:
            // not overloaded while the workers have room.
            fair_run(Scenario::Bulk, 0.8, 0.5),
        ];
        assert_eq!(overload_reason(&kept_up), None);
        let mut steady_behind = kept_up.clone();
        steady_behind[1].throughput_per_s = 0.85 * 300.0;
        let why = overload_reason(&steady_behind).expect("a steady run behind its arrivals");
        assert!(
            why.contains("Steady") && why.contains("accepted 255/s of 300/s"),
            "{why}"
        );
        let mut bulk_busy = kept_up.clone();
        bulk_busy[2].utilisation_measured = 0.9;
        let why = overload_reason(&bulk_busy).expect("a bulk run with its workers 90% busy");
        assert!(why.contains("Bulk") && why.contains("90% busy"), "{why}");
        // The machine's CPUs: a median over the rounds above 85% is overload,
        // one busy round of three is not.
        let cpu = |share: f64| RoundCpu {
            load: Some(crate::cpu::SpanCpu {
                busy_share: share,
                ..Default::default()
            }),
            thirds: Vec::new(),
        };
        let mut machine_busy = kept_up.clone();
        machine_busy[1].cpu_by_round = vec![cpu(0.7), cpu(0.95), cpu(0.6)];
        assert_eq!(overload_reason(&machine_busy), None);
        machine_busy[1].cpu_by_round = vec![cpu(0.9), cpu(0.95), cpu(0.6)];
        let why = overload_reason(&machine_busy).expect("a steady run on a machine 90% busy");
        assert!(
            why.contains("Steady") && why.contains("CPUs 90% busy"),
            "{why}"
        );
    }

    #[test]
    fn cells_parse_from_their_short_form() {
        let c: Cell = "1000x2x20".parse().unwrap();
        assert_eq!((c.stores, c.noisy_stores, c.noise_factor), (1000, 2, 20));
        assert!("1000x2".parse::<Cell>().is_err());
        assert!("ax2x3".parse::<Cell>().is_err());
    }
}
