//! `courier bench fairness`: will one noisy store hurt the others?
//!
//! One PostgreSQL cluster of its own (in a temporary directory, with
//! `synchronous_commit=off`: it measures the scheduler, not the disk), the
//! fake provider in-process (faults off, log-normal latency, which each
//! message states, spread evenly over the run: [`spread_latencies`]), and in-process
//! workers (`Worker` with the real [`ProviderClient`]) sized so the
//! baseline keeps them about 60% busy: headroom is part of fairness.
//!
//! Three scenarios, each with fair and with FIFO claiming, each on a fresh
//! database, each fed by the same open-loop schedule for both claim modes:
//! every store equal; the noisy stores at `factor` times the rate, steadily;
//! the same total in bursts of thousands. The latency of an action is from
//! its enqueue to the provider's accepted answer, as the database recorded
//! them. The reference is the fair baseline of the same run.
//!
//! Two flow-control scenarios ([`flow`]) can run in the same run, on the
//! same cluster and capacity: a store given a rate under a burst, and the
//! fake provider's own rate limit below the offered load.
//!
//! # Invariants
//! - Fair and FIFO runs of a scenario see the same arrival schedule.
//! - The quiet stores are the same stores in every scenario (every store but
//!   the noisy ones), so their percentiles compare like with like.
//! - Every action enqueued is accepted before a run is measured, or the run
//!   fails with a time-out: a percentile never silently leaves out the slow tail.

use crate::harness::bench_worker;
use crate::harness::drain::{drain, Progress};
use crate::harness::probe::{CpuProbe, LatenessProbe, Probes, Running, ScanProbe};
use crate::harness::server::{with_cluster, Statements};
pub mod flow;
pub mod pacing;
mod report;
mod round;

pub use flow::{FlowConfig, FlowReport, Scenarios};
pub use report::*;
use round::*;

use crate::schedule::{arrivals, spread_latencies, Arrival, Scenario, Shape};
use crate::stats::{
    calibrate, latency_mean_ms, median, ratio, thirds_p95, timeline_p95, trend_ratio, Calibration,
    Percentiles, ThirdP95,
};
use crate::views::BenchViews;
use crate::views::{
    statements_enable, statements_reset, statements_top, ActionLatency, StatementStat,
};
use crate::{bar, cpu, run_dir, BenchError};
use courier_core::Limits;
use courier_fake::{FakeConfig, FaultRates, Latency, LatencySubject};
use courier_inproc::WorkerPool;
use courier_provider::{ClientConfig, ProviderClient};
use courier_store::cluster::Cluster;
use courier_store::{ClaimMode, NewAction, PgStore, StoreConfig};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The per-action database time assumed when planning capacity (claim share,
/// intent, attempt and settle on loopback with asynchronous commit).
pub const DB_ALLOWANCE_MS: f64 = 3.0;
/// The worker count when neither `--workers` nor `--concurrency` is given.
pub const WORKERS_DEFAULT: u32 = 4;
/// The quiet stores' p95 may grow by this factor in a noisy scenario with
/// fair claiming (the target).
pub const FAIR_RATIO_MAX: f64 = 1.10;
/// The fair baseline's quiet p95 may be at most this many times FIFO's:
/// fairness should cost little when every store is equal.
pub const BASELINE_VS_FIFO_MAX: f64 = 1.2;
/// No fair round may trend upward: the p95 of its last third at most this
/// many times its first third's.
pub const TREND_MAX: f64 = 1.2;
/// A second needs this many quiet actions to be a round's worst.
const WORST_SECOND_SAMPLES_MIN: usize = 20;

/// Statements reported per run.
const STATEMENTS_MAX: i64 = 6;

const API_KEY: &str = "bench-api-key";
const SECRET: &str = "bench-webhook-secret";
const DATABASE: &str = "courier_bench_fairness";

/// Everything a fairness run needs; checked by [`FairnessConfig::validate`].
#[derive(Debug, Clone)]
pub struct FairnessConfig {
    pub stores: u32,
    /// How many of the stores are noisy in the noisy scenarios.
    pub noisy_stores: u32,
    /// How many times the ordinary rate a noisy store sends.
    pub noise_factor: u32,
    /// Arrivals per second of each ordinary store.
    pub rate_per_store_hz: f64,
    /// Length of each scenario's load in each round.
    pub duration_s: u64,
    /// How many times every scenario and claim mode is run, in alternating
    /// order (forwards, then backwards), their latencies pooled: drift of a
    /// shared machine then weighs on every column alike.
    pub rounds: u32,
    /// Actions enqueued in the first seconds of a scenario are not measured.
    pub warmup_s: u64,
    pub seed: u64,
    /// Worker count; sized from the target utilisation when not given.
    pub workers: Option<u32>,
    /// Actions each worker works on at once; sized when not given.
    pub concurrency: Option<u32>,
    pub store_in_flight_max: u32,
    /// Size the per-store cap from the service time instead: a noisy store
    /// gets the slots its rate needs at the utilisation target (at least
    /// `store_in_flight_max`), as the worker capacity is sized for headroom.
    /// Without it, a cap of 1 holds a store at one action per service time
    /// (about 20/s) and a noisy store at 50/s piles up behind its own cap.
    pub store_cap_sized: bool,
    pub claim_batch_max: u32,
    pub idle_poll_ms: u64,
    /// The share of worker capacity the baseline should keep busy.
    pub utilisation_target: f64,
    /// Length of the calibration run that measures the time an action holds
    /// a worker slot, from which the capacity is sized; 0 plans from the
    /// provider's mean latency plus [`DB_ALLOWANCE_MS`] instead.
    pub calibration_s: u64,
    /// The provider's latency for each send.
    pub latency: Latency,
    /// A bulk store's bursts are at least this large.
    pub burst_actions_min: u32,
    /// How long the queue may take to drain after a scenario's load ends.
    pub drain_timeout_s: u64,
    /// Enqueues in flight at once; an arrival beyond it waits (and the wait
    /// is reported as lag).
    pub enqueue_in_flight_max: usize,
    /// Whether the steady scenario also runs with FIFO claiming. No target
    /// reads it (the targets compare fair runs with the fair baseline, and
    /// the fair baseline with FIFO's); the matrix skips it to spend its time
    /// on rounds.
    pub fifo_steady: bool,
    /// The samplers to run beside the load; every figure the targets read
    /// is measured without them.
    pub probes: Probes,
    /// Progress bars on stderr.
    pub progress: bool,
    /// Which scenarios run: the classic ones, the flow ones, or both.
    pub scenarios: Scenarios,
    /// The flow scenarios' settings.
    pub flow: FlowConfig,
}

impl FairnessConfig {
    /// The full benchmark's defaults.
    pub fn new(seed: u64) -> Self {
        FairnessConfig {
            stores: 100,
            noisy_stores: 1,
            noise_factor: 10,
            rate_per_store_hz: 2.5,
            duration_s: 40,
            rounds: 3,
            warmup_s: 2,
            seed,
            workers: None,
            concurrency: None,
            store_in_flight_max: 1,
            store_cap_sized: false,
            claim_batch_max: 16,
            idle_poll_ms: 10,
            utilisation_target: 0.6,
            calibration_s: 10,
            latency: Latency::LogNormal {
                median_ms: 25.0,
                sigma: 0.5,
            },
            burst_actions_min: 1000,
            drain_timeout_s: 300,
            enqueue_in_flight_max: 64,
            fifo_steady: true,
            probes: Probes::default(),
            progress: true,
            scenarios: Scenarios::CLASSIC,
            flow: FlowConfig::new(),
        }
    }

    /// Seconds, a tiny load: checks that everything runs, judges nothing.
    pub fn smoke(seed: u64) -> Self {
        FairnessConfig {
            stores: 10,
            rate_per_store_hz: 5.0,
            duration_s: 3,
            rounds: 1,
            warmup_s: 0,
            calibration_s: 2,
            burst_actions_min: 50,
            drain_timeout_s: 60,
            flow: FlowConfig::smoke(),
            ..FairnessConfig::new(seed)
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(2..=10_000).contains(&self.stores) {
            return Err("--stores must be within 2..=10000".into());
        }
        if self.noisy_stores == 0 || self.noisy_stores >= self.stores {
            return Err("--noisy-stores must be at least 1 and fewer than --stores".into());
        }
        if !(1..=1000).contains(&self.noise_factor) {
            return Err("--noise-factor must be within 1..=1000".into());
        }
        let rate_ok = self.rate_per_store_hz.is_finite()
            && self.rate_per_store_hz > 0.0
            && self.rate_per_store_hz * f64::from(self.stores) <= 20_000.0;
        if !rate_ok {
            return Err(
                "--rate-per-store must be positive, and --stores times it at most 20000 per second"
                    .into(),
            );
        }
        if !(1..=3600).contains(&self.duration_s) {
            return Err("--duration-s must be within 1..=3600".into());
        }
        if !(1..=20).contains(&self.rounds) {
            return Err("--rounds must be within 1..=20".into());
        }
        if self.warmup_s >= self.duration_s {
            return Err("--warmup-s must be shorter than --duration-s".into());
        }
        if self.workers.is_some_and(|w| !(1..=64).contains(&w)) {
            return Err("--workers must be within 1..=64".into());
        }
        if self.concurrency.is_some_and(|c| !(1..=1024).contains(&c)) {
            return Err("--concurrency must be within 1..=1024".into());
        }
        if !(1..=10_000).contains(&self.store_in_flight_max) {
            return Err("--store-in-flight-max must be within 1..=10000".into());
        }
        if !(1..=1000).contains(&self.claim_batch_max) {
            return Err("--claim-batch-max must be within 1..=1000".into());
        }
        if !(1..=10_000).contains(&self.idle_poll_ms) {
            return Err("--idle-poll-ms must be within 1..=10000".into());
        }
        let target_ok = self.utilisation_target > 0.0 && self.utilisation_target < 1.0;
        if !target_ok {
            return Err("--utilisation-target must be within (0, 1)".into());
        }
        if self.calibration_s > 600 {
            return Err("--calibration-s must be within 0..=600".into());
        }
        if !(1..=1_000_000).contains(&self.burst_actions_min) {
            return Err("--burst-actions-min must be within 1..=1000000".into());
        }
        if !(1..=3600).contains(&self.drain_timeout_s) {
            return Err("--drain-timeout-s must be within 1..=3600".into());
        }
        if !(1..=4096).contains(&self.enqueue_in_flight_max) {
            return Err("enqueue_in_flight_max must be within 1..=4096".into());
        }
        if !self.scenarios.classic && !self.scenarios.flow() {
            return Err("--scenarios must name at least one scenario".into());
        }
        if self.scenarios.flow() {
            self.flow.validate()?;
        }
        Ok(())
    }

    fn shape(&self) -> Shape {
        Shape {
            stores: self.stores,
            noisy_stores: self.noisy_stores,
            noise_factor: self.noise_factor,
            rate_per_store_hz: self.rate_per_store_hz,
            duration_ms: self.duration_s as f64 * 1000.0,
            burst_actions_min: self.burst_actions_min,
        }
    }

    /// The worker capacity planned from the provider's mean latency plus
    /// [`DB_ALLOWANCE_MS`] (before any calibration run).
    pub fn calibration(&self) -> Result<Calibration, String> {
        self.calibration_for(
            latency_mean_ms(&self.latency) + DB_ALLOWANCE_MS,
            self.utilisation_target,
        )
    }

    /// The worker capacity for a service time and a utilisation target, for
    /// the busiest scenario (the noisy ones offer the most): headroom is part
    /// of fairness, so the noisy scenarios must not run the workers hot.
    pub fn calibration_for(&self, service_ms: f64, target: f64) -> Result<Calibration, String> {
        calibrate(
            self.shape().offered_hz(Scenario::Steady),
            service_ms,
            target,
            self.workers,
            self.concurrency,
            WORKERS_DEFAULT,
        )
    }

    /// The per-store cap a run with capacity `c` uses: the fixed one, or,
    /// when sized, the slots a noisy store's rate keeps busy at the
    /// utilisation target (rounded up), never below the fixed one.
    pub fn store_cap(&self, c: &Calibration) -> u32 {
        if !self.store_cap_sized {
            return self.store_in_flight_max;
        }
        let noisy_hz = self.rate_per_store_hz * f64::from(self.noise_factor);
        let needed = noisy_hz * c.service_ms / 1000.0 / self.utilisation_target;
        let sized = needed.ceil().clamp(1.0, 10_000.0) as u32;
        sized.max(self.store_in_flight_max)
    }

    /// True when the calibration run is skipped (fixed capacity or asked for).
    fn skips_calibration_run(&self) -> bool {
        self.calibration_s == 0 || (self.workers.is_some() && self.concurrency.is_some())
    }
}

/// Runs every scenario with both claim modes and writes the chart.
pub async fn run(cfg: &FairnessConfig) -> Result<FairnessReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let assumed = cfg.calibration().map_err(BenchError::Settings)?;
    Plan::new(cfg, assumed, cfg.duration_s)?;
    let started = Instant::now();
    let dir = run_dir("courier-bench-fairness-")?;
    let cluster = Cluster::new(dir.path().join("pg")).setting("synchronous_commit", "off");
    // Where each run's database time goes, when the server has it (as
    // `courier bench scale`): top-level statements only, planning too.
    let track = Statements::Top { planning: true };
    let (runs, calibration, service_ms_measured) = with_cluster(cluster, track, async |server| {
        let url = &server.url;
        let statements = server.statements_loaded && statements_enable(url).await?;
        let provider =
            courier_fake::start(fake_config(cfg, &dir.path().join("provider.jsonl"))).await?;
        let ctx = Ctx {
            cfg,
            server_url: url.clone(),
            provider_url: provider.url(),
            statements,
            postmaster: server.postmaster,
            dir: dir.path(),
        };
        let runs = async {
            let (calibration, measured) = calibration_run(&ctx, assumed).await?;
            let plan = Plan::new(cfg, calibration, cfg.duration_s)?;
            let runs = if cfg.scenarios.classic {
                all_runs(&ctx, &plan).await?
            } else {
                Vec::new()
            };
            let flow = flow::flow_runs(&ctx, calibration).await?;
            Ok::<_, BenchError>(((runs, flow), calibration, measured))
        }
        .await;
        provider.shutdown().await?;
        runs
    })
    .await?;
    let (runs, flow) = runs;
    let settings = settings(cfg, assumed, calibration, service_ms_measured);
    let verdict = verdict(&runs);
    let mut report = FairnessReport {
        seed: cfg.seed,
        settings,
        runs,
        verdict,
        flow,
        chart: None,
        wall_time_s: 0.0,
    };
    report.wall_time_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The fake provider of a run: faults off, the run's latency, stated by
/// each message that states one, logging to `log`.
fn fake_config(cfg: &FairnessConfig, log: &Path) -> FakeConfig {
    let mut fake = FakeConfig::new(log, API_KEY, SECRET);
    fake.faults = FaultRates::NONE;
    fake.latency = cfg.latency;
    fake.latency_subject = LatencySubject::Stated;
    fake.seed = cfg.seed;
    fake
}

/// The settings a report was produced with.
fn settings(
    cfg: &FairnessConfig,
    assumed: Calibration,
    calibration: Calibration,
    service_ms_measured: Option<f64>,
) -> FairnessSettings {
    FairnessSettings {
        stores: cfg.stores,
        noisy_stores: cfg.noisy_stores,
        noise_factor: cfg.noise_factor,
        rate_per_store_hz: cfg.rate_per_store_hz,
        duration_s: cfg.duration_s,
        rounds: cfg.rounds,
        warmup_s: cfg.warmup_s,
        store_in_flight_max: cfg.store_cap(&calibration),
        claim_batch_max: cfg.claim_batch_max,
        idle_poll_ms: cfg.idle_poll_ms,
        provider_latency: cfg.latency.to_string(),
        provider_latency_mean_ms: latency_mean_ms(&cfg.latency),
        synchronous_commit: "off",
        service_ms_assumed: assumed.service_ms,
        service_ms_measured,
        calibration_s: if cfg.skips_calibration_run() {
            0
        } else {
            cfg.calibration_s
        },
        calibration,
    }
}

struct Ctx<'a> {
    cfg: &'a FairnessConfig,
    server_url: String,
    provider_url: String,
    /// The server has pg_stat_statements: each run reports its costliest
    /// statements.
    statements: bool,
    /// The server's postmaster, whose processes' CPU each run reads.
    postmaster: Option<u32>,
    /// The run's directory (the flow runs' provider logs).
    dir: &'a Path,
}

/// The capacity and length of a run.
struct Plan {
    calibration: Calibration,
    limits: Limits,
    duration_s: u64,
}

impl Plan {
    fn new(cfg: &FairnessConfig, c: Calibration, duration_s: u64) -> Result<Plan, BenchError> {
        let limits = Limits {
            store_in_flight_max: cfg.store_cap(&c),
            claim_batch_max: cfg.claim_batch_max,
            worker_concurrency_max: c.concurrency,
            ..Limits::default()
        };
        limits
            .validate()
            .map_err(|e| BenchError::Settings(e.to_string()))?;
        if c.workers > 64 || c.concurrency > 1024 {
            return Err(BenchError::Settings(format!(
                "the load needs {} workers x {} actions, above 64 x 1024: lower --rate-per-store",
                c.workers, c.concurrency
            )));
        }
        Ok(Plan {
            calibration: c,
            limits,
            duration_s,
        })
    }
}

/// Measures the time an action holds a slot under the baseline load, with
/// room to spare (about 40% busy as assumed), and sizes the capacity from
/// it. Returns the capacity and the measured service time.
async fn calibration_run(
    ctx: &Ctx<'_>,
    assumed: Calibration,
) -> Result<(Calibration, Option<f64>), BenchError> {
    let cfg = ctx.cfg;
    if cfg.skips_calibration_run() {
        return Ok((assumed, None));
    }
    let roomy = cfg
        .calibration_for(
            assumed.service_ms,
            (cfg.utilisation_target * 0.66).max(0.05),
        )
        .map_err(BenchError::Settings)?;
    let plan = Plan::new(cfg, roomy, cfg.calibration_s)?;
    let shape = Shape {
        duration_ms: cfg.calibration_s as f64 * 1000.0,
        ..cfg.shape()
    };
    let seed = cfg.seed ^ 0x00ca_11b7;
    let mut schedule = arrivals(&shape, Scenario::Baseline, seed);
    spread_latencies(&mut schedule, cfg.noisy_stores, &cfg.latency, seed);
    let run = run_one(
        ctx,
        &plan,
        ClaimMode::Fair,
        &schedule,
        "[calibration] fair · every store equal",
    )
    .await?;
    // The median of per-second means: a second slowed by another job on the
    // machine does not size the whole benchmark.
    let service_ms = median(run.hold_ms_by_second.iter().copied());
    let service_ms = if service_ms.is_finite() {
        service_ms.max(0.1)
    } else {
        (run.hold_us_total as f64 / 1000.0 / run.actions.max(1) as f64).max(0.1)
    };
    let c = cfg
        .calibration_for(service_ms, cfg.utilisation_target)
        .map_err(BenchError::Settings)?;
    Ok((c, Some(service_ms)))
}

fn store_name(i: u32) -> String {
    format!("store-{i:03}")
}

/// The scenarios and claim modes of one round, in their forward order.
fn run_order(cfg: &FairnessConfig) -> Vec<(Scenario, ClaimMode)> {
    let mut order = Vec::new();
    for scenario in Scenario::ALL {
        order.push((scenario, ClaimMode::Fair));
        if scenario != Scenario::Steady || cfg.fifo_steady {
            order.push((scenario, ClaimMode::Fifo));
        }
    }
    order
}

async fn all_runs(ctx: &Ctx<'_>, plan: &Plan) -> Result<Vec<FairnessRun>, BenchError> {
    let cfg = ctx.cfg;
    let shape = cfg.shape();
    let order = run_order(cfg);
    let total_runs = order.len() * cfg.rounds as usize;
    let mut pooled: Vec<Vec<Samples>> = vec![Vec::new(); order.len()];
    let mut n = 0;
    for round in 0..cfg.rounds {
        // Forwards, then backwards: a drift of the machine over the run
        // weighs on every column alike.
        let mut indices: Vec<usize> = (0..order.len()).collect();
        if round % 2 == 1 {
            indices.reverse();
        }
        for i in indices {
            let (scenario, claim) = order[i];
            // One seed per round: the same schedule for both claim modes of
            // a scenario, and the same quiet arrivals in every scenario (each
            // store draws from its own stream), sending the same messages,
            // which state their provider latency (spread evenly over the
            // round): a quiet action waits as long at the provider in every
            // run of a round, and the runs' quiet p95s differ by what the
            // courier did.
            let seed = cfg
                .seed
                .wrapping_add((1 + 8 * u64::from(round)).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut schedule = arrivals(&shape, scenario, seed);
            spread_latencies(&mut schedule, cfg.noisy_stores, &cfg.latency, seed);
            n += 1;
            let label = scenario.label(cfg.noisy_stores, cfg.noise_factor);
            let title = format!("[{n}/{total_runs}] {} · {label}", claim_name(claim));
            pooled[i].push(run_one(ctx, plan, claim, &schedule, &title).await?);
        }
    }
    let mut runs = Vec::new();
    for ((scenario, claim), samples) in order.into_iter().zip(pooled) {
        runs.push(summarise(cfg, plan, scenario, claim, samples)?);
    }
    // Each round's ratios against that round's fair baseline.
    let base: Vec<f64> = runs
        .iter()
        .find(|r| r.scenario == Scenario::Baseline && r.claim == ClaimMode::Fair)
        .map(|r| r.quiet_by_round.iter().map(|p| p.p95_ms).collect())
        .unwrap_or_default();
    for run in &mut runs {
        run.ratio_by_round = run
            .quiet_by_round
            .iter()
            .zip(&base)
            .map(|(p, b)| ratio(p.p95_ms, *b))
            .collect();
        run.quiet_p95_ratio = median(run.ratio_by_round.iter().copied());
    }
    Ok(runs)
}

/// What one run measured, before rounds are pooled.
#[derive(Debug, Clone, Default)]
struct Samples {
    /// Quiet stores' latencies after the warm-up, in microseconds.
    quiet_us: Vec<u64>,
    /// The same actions' waits from enqueue to claim, in microseconds.
    quiet_wait_us: Vec<u64>,
    /// The run's costliest statements (load and drain, and the latency
    /// query that follows them is not yet counted); empty without
    /// pg_stat_statements.
    statements: Vec<StatementStat>,
    /// Quiet stores' `(enqueued_ms, latency_us)`, warm-up included.
    quiet_timeline: Vec<(f64, u64)>,
    noisy_us: Vec<u64>,
    actions: u64,
    hold_us_total: u64,
    /// The mean claim-to-settle time of the actions enqueued in each second.
    hold_ms_by_second: Vec<f64>,
    /// First enqueue to last acceptance.
    window_ms: f64,
    lag_max_ms: f64,
    /// The quiet p95 of the last third of the load over the first third's.
    trend: f64,
    /// The quiet p95s of each third, whole and split at the claim.
    thirds: Vec<Option<ThirdP95>>,
    /// Sequential scans of `actions` per second, per poll during the load
    /// (the scans probe).
    seq_scans_per_s: Option<Vec<f64>>,
    /// The machine's and the server's CPU during the measured load (the
    /// CPU probe).
    cpu: Option<RoundCpu>,
    /// Where the run stalled (the CPU or the lateness probe).
    stalls: Option<RoundStalls>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_second_is_the_highest_p95_with_the_machine_and_runtime_then() {
        // 30 quiet actions a second for 4 s; the third second's are slow.
        let mut samples = Vec::new();
        for s in 0..4u64 {
            for i in 0..30u64 {
                let slow = s == 2;
                let us = if slow {
                    200_000 + i * 1_000
                } else {
                    50_000 + i * 100
                };
                samples.push((
                    s as f64 * 1000.0 + i as f64 * 30.0,
                    us,
                    if slow { 150_000 } else { 5_000 },
                ));
            }
        }
        // A second with too few actions is not judged, however slow.
        samples.push((4_100.0, 9_000_000, 0));
        let reading = |ms: f64, io_s: f64| cpu::Reading {
            at_ms: ms,
            ticks: cpu::Ticks {
                stalls: Some(cpu::StallTotals {
                    io_some: (io_s * 1e6) as u64,
                    ..Default::default()
                }),
                ..Default::default()
            },
            autovacuum: 0,
        };
        // The disk stalled from 2.0 to 2.6 s.
        let readings: Vec<cpu::Reading> = (0..=60)
            .map(|i| {
                let ms = f64::from(i) * 100.0;
                reading(ms, ((ms - 2_000.0) / 1_000.0).clamp(0.0, 0.6))
            })
            .collect();
        let late = [(500.0, 7.0), (2_400.0, 180.0), (5_900.0, 9.0)];
        let w =
            worst_second(&samples, 1_000.0, 5_000.0, 20, &readings, Some(&late)).expect("judged");
        assert_eq!(w.at_s, 2.0);
        assert_eq!(w.count, 30);
        assert!(
            w.p95_ms > 200.0 && (w.wait_p95_ms - 150.0).abs() < 0.5,
            "{w:?}"
        );
        // Its span runs from 2.0 s until its p95 action was accepted.
        assert!((w.span_ms - (1_000.0 + w.p95_ms)).abs() < 1e-9);
        assert_eq!(w.runtime_late_max_ms, Some(180.0));
        let stalls = w.cpu.and_then(|c| c.stalls).expect("read");
        assert!(
            (stalls.io_some - 0.6 / (w.span_ms / 1_000.0)).abs() < 0.05,
            "{stalls:?}"
        );
        // A slower second outside the window is not judged...
        let later =
            worst_second(&samples, 3_000.0, 5_000.0, 20, &readings, Some(&late)).expect("judged");
        assert_eq!(later.at_s, 3.0);
        // ...nor a second with fewer actions than asked for.
        assert!(worst_second(&samples, 0.0, 5_000.0, 31, &readings, Some(&late)).is_none());
        assert_eq!(late_max(&late, 0.0, 1_000.0), 7.0);
        assert_eq!(late_max(&late, 1_000.0, 2_000.0), 0.0);
    }

    #[test]
    fn defaults_and_smoke_settings_are_valid() {
        assert_eq!(FairnessConfig::new(1).validate(), Ok(()));
        assert_eq!(FairnessConfig::smoke(1).validate(), Ok(()));
        let c = FairnessConfig::new(1).calibration().unwrap();
        assert!(
            c.utilisation_planned <= 0.6 && c.utilisation_planned > 0.45,
            "{c:?}"
        );
    }

    #[test]
    fn a_sized_store_cap_gives_a_noisy_store_room_for_its_rate() {
        let mut cfg = FairnessConfig {
            stores: 100,
            noise_factor: 20,
            rate_per_store_hz: 2.5,
            ..FairnessConfig::new(1)
        };
        let c = cfg.calibration_for(45.0, 0.6).unwrap();
        assert_eq!(cfg.store_cap(&c), 1, "fixed unless asked");
        cfg.store_cap_sized = true;
        // 50/s x 45 ms = 2.25 actions held at once, at 60% busy: 3.75.
        assert_eq!(cfg.store_cap(&c), 4);
        // A slow store needs no more than the floor, and the floor holds.
        cfg.rate_per_store_hz = 0.025;
        assert_eq!(cfg.store_cap(&c), 1);
        cfg.store_in_flight_max = 3;
        assert_eq!(cfg.store_cap(&c), 3);
    }

    #[test]
    fn bad_settings_name_their_flag() {
        let base = FairnessConfig::new(1);
        let cases = [
            (
                FairnessConfig {
                    stores: 1,
                    ..base.clone()
                },
                "--stores",
            ),
            (
                FairnessConfig {
                    noisy_stores: 100,
                    ..base.clone()
                },
                "--noisy-stores",
            ),
            (
                FairnessConfig {
                    noise_factor: 0,
                    ..base.clone()
                },
                "--noise-factor",
            ),
            (
                FairnessConfig {
                    duration_s: 0,
                    ..base.clone()
                },
                "--duration-s",
            ),
            (
                FairnessConfig {
                    workers: Some(0),
                    ..base.clone()
                },
                "--workers",
            ),
            (
                FairnessConfig {
                    store_in_flight_max: 0,
                    ..base.clone()
                },
                "--store-in-flight-max",
            ),
            (
                FairnessConfig {
                    rate_per_store_hz: f64::NAN,
                    ..base.clone()
                },
                "--rate-per-store",
            ),
        ];
        for (cfg, flag) in cases {
            let err = cfg.validate().expect_err(flag);
            assert!(err.contains(flag), "{err:?} does not name {flag}");
        }
    }

    #[test]
    fn a_trending_round_is_printed_with_its_thirds_and_worst_second() {
        let third = |wait_ms, after_claim_ms| {
            Some(ThirdP95 {
                count: 600,
                latency_ms: wait_ms + after_claim_ms,
                wait_ms,
                after_claim_ms,
            })
        };
        let mut steady = run_of(Scenario::Steady, ClaimMode::Fair, 1.0);
        steady.label = "one store 10x, steady".into();
        steady.trend_by_round = vec![1.05, 1.31];
        steady.thirds_by_round = vec![Vec::new(), vec![third(8.0, 56.0), None, third(9.0, 67.0)]];
        steady.stalls_by_round = vec![
            RoundStalls::default(),
            RoundStalls {
                worst_second: Some(WorstSecond {
                    at_s: 6.0,
                    count: 80,
                    p95_ms: 246.0,
                    wait_p95_ms: 12.0,
                    span_ms: 1_246.0,
                    cpu: Some(cpu::SpanCpu {
                        busy_share: 0.8,
                        stalls: Some(cpu::Stalls {
                            io_some: 0.4,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    runtime_late_max_ms: Some(180.0),
                }),
                runtime_late_max_ms_by_third: vec![0.0, 0.0, 180.0],
            },
        ];
        // FIFO trends are not judged, and not printed.
        let mut fifo = run_of(Scenario::Bulk, ClaimMode::Fifo, 1.0);
        fifo.trend_by_round = vec![1.5];
        let lines = trending_lines(&[steady, fifo]);
        assert_eq!(lines.lines().count(), 1, "{lines}");
        assert!(
            lines.contains("one store 10x, steady round 2: trend 1.31x"),
            "{lines}"
        );
        assert!(lines.contains("after the claim 56.0 -> 67.0 ms"), "{lines}");
        assert!(lines.contains("worst second 6 s: p95 246.0 ms"), "{lines}");
        assert!(
            lines.contains("runtime late 180 ms, CPUs 80% busy"),
            "{lines}"
        );
        assert!(lines.contains("io 40% (full 0%)"), "{lines}");
    }

    fn run_of(scenario: Scenario, claim: ClaimMode, ratio: f64) -> FairnessRun {
        let p = Percentiles {
            count: 10,
            p50_ms: 1.0,
            p95_ms: 2.0,
            p99_ms: 3.0,
            max_ms: 4.0,
        };
        FairnessRun {
            scenario,
            label: String::new(),
            claim,
            quiet: p,
            quiet_wait: None,
            statements: Vec::new(),
            quiet_p95_ratio: ratio,
            quiet_by_round: vec![p],
            ratio_by_round: vec![ratio],
            trend_by_round: vec![1.0],
            thirds_by_round: Vec::new(),
            seq_scans_per_s_by_round: vec![vec![0.0; 6]],
            cpu_by_round: Vec::new(),
            stalls_by_round: Vec::new(),
            noisy: None,
            actions: 10,
            offered_per_s: 1.0,
            throughput_per_s: 1.0,
            utilisation_measured: 0.5,
            hold_mean_ms: 1.0,
            enqueue_lag_max_ms: 0.0,
            timeline: Vec::new(),
            bursts_s: Vec::new(),
        }
    }

    #[test]
    fn every_run_a_target_reads_is_in_the_order() {
        let mut cfg = FairnessConfig::new(1);
        assert_eq!(run_order(&cfg).len(), 6);
        cfg.fifo_steady = false;
        let order = run_order(&cfg);
        assert_eq!(order.len(), 5);
        assert!(!order.contains(&(Scenario::Steady, ClaimMode::Fifo)));
        for scenario in Scenario::ALL {
            assert!(order.contains(&(scenario, ClaimMode::Fair)), "{scenario:?}");
        }
        assert!(order.contains(&(Scenario::Baseline, ClaimMode::Fifo)));
        assert!(order.contains(&(Scenario::Bulk, ClaimMode::Fifo)));
    }

    #[test]
    fn the_verdict_takes_the_worst_noisy_fair_ratio() {
        let runs = vec![
            run_of(Scenario::Baseline, ClaimMode::Fair, 1.0),
            run_of(Scenario::Baseline, ClaimMode::Fifo, 0.9),
            run_of(Scenario::Steady, ClaimMode::Fair, 1.05),
            run_of(Scenario::Steady, ClaimMode::Fifo, 1.3),
            run_of(Scenario::Bulk, ClaimMode::Fair, 1.08),
            run_of(Scenario::Bulk, ClaimMode::Fifo, 4.0),
        ];
        let v = verdict(&runs);
        assert!(v.fair_within_target);
        assert_eq!((v.fair_ratio_worst, v.fifo_bulk_ratio), (1.08, 4.0));
        assert_eq!((v.fair_rounds_above_target, v.fair_rounds), (0, 2));
        let mut runs = runs;
        runs[4].quiet_p95_ratio = 1.2;
        assert!(!verdict(&runs).fair_within_target);
        // A collapsed round under a good median is counted and named.
        runs[4].quiet_p95_ratio = 1.02;
        runs[4].ratio_by_round = vec![140.7, 0.98, 1.02];
        let v = verdict(&runs);
        assert!(v.fair_within_target);
        assert_eq!((v.fair_rounds_above_target, v.fair_rounds), (1, 4));
        assert_eq!(v.fair_round_ratio_worst, 140.7);
        assert!(v
            .rounds_line()
            .contains("1 of 4 noisy rounds above 1.10x (worst round 140.70x)"));
    }
}
