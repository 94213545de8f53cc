//! `courier bench fairness`: will one noisy store hurt the others?
//!
//! One PostgreSQL cluster of its own (in a temporary directory, with
//! `synchronous_commit=off`: it measures the scheduler, not the disk), the
//! fake provider in-process (faults off, log-normal latency, which each
//! message states, spread evenly over the run: [`spread_latencies`]), and in-process
//! workers ([`Worker`] with the real [`ProviderClient`]) sized so the
//! baseline keeps them about 60% busy: headroom is part of fairness.
//!
//! Three scenarios, each with fair and with FIFO claiming, each on a fresh
//! database, each fed by the same open-loop schedule for both claim modes:
//! every store equal; the noisy stores at `factor` times the rate, steadily;
//! the same total in bursts of thousands. The latency of an action is from
//! its enqueue to the provider's accepted answer, as the database recorded
//! them. The reference is the fair baseline of the same run.
//!
//! # Invariants
//! - Fair and FIFO runs of a scenario see the same arrival schedule.
//! - The quiet stores are the same stores in every scenario (every store but
//!   the noisy ones), so their percentiles compare like with like.
//! - Every action enqueued is accepted before a run is measured, or the run
//!   fails with a time-out: a percentile never silently leaves out the slow tail.

use crate::harness::bench_worker;
use crate::schedule::{arrivals, spread_latencies, Arrival, Scenario, Shape};
use crate::stats::{
    calibrate, latency_mean_ms, median, ratio, thirds_p95, timeline_p95, trend_ratio, Calibration,
    Percentiles, ThirdP95,
};
use crate::views::BenchViews;
use crate::views::{statements_enable, statements_reset, statements_top, StatementStat};
use crate::{bar, cpu, run_dir, BenchError};
use courier_core::Limits;
use courier_fake::{FakeConfig, FaultRates, Latency, LatencySubject};
use courier_inproc::WorkerPool;
use courier_provider::{ClientConfig, ProviderClient};
use courier_store::cluster::{Cluster, StopMode};
use courier_store::{ClaimMode, NewAction, PgStore, StoreConfig};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

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
/// How often `pg_stat_user_tables` is read for the sequential scans of
/// `actions` during a run's load.
const SCAN_POLL: Duration = Duration::from_secs(2);
/// How often a run reads the machine's and the server's CPU during its load.
const CPU_READ_EVERY: Duration = Duration::from_millis(200);
/// The timer by which a run tells how late the bench's own runtime (load,
/// workers, provider) wakes, and the lateness worth keeping.
const LATE_EVERY: Duration = Duration::from_millis(10);
const LATE_NOTED_MS: f64 = 5.0;
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
    /// Progress bars on stderr.
    pub progress: bool,
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
            progress: true,
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

/// The settings a report was produced with.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessSettings {
    pub stores: u32,
    pub noisy_stores: u32,
    pub noise_factor: u32,
    pub rate_per_store_hz: f64,
    pub duration_s: u64,
    pub rounds: u32,
    pub warmup_s: u64,
    pub store_in_flight_max: u32,
    pub claim_batch_max: u32,
    pub idle_poll_ms: u64,
    pub provider_latency: String,
    pub provider_latency_mean_ms: f64,
    pub synchronous_commit: &'static str,
    /// The time an action holds a slot as assumed before calibrating.
    pub service_ms_assumed: f64,
    /// The mean claim-to-settle time measured by the calibration run, from
    /// which the capacity was sized (None: no calibration run).
    pub service_ms_measured: Option<f64>,
    pub calibration_s: u64,
    /// The capacity every scenario ran with.
    pub calibration: Calibration,
}

/// One scenario with one claim mode, every round pooled.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessRun {
    pub scenario: Scenario,
    pub label: String,
    pub claim: ClaimMode,
    /// Every store but the noisy ones, enqueued after the warm-up: each
    /// figure the median of that figure over the rounds.
    pub quiet: Percentiles,
    /// The same actions' wait from enqueue to claim (the part of the
    /// latency the claim decides), medians over the rounds.
    pub quiet_wait: Option<Percentiles>,
    /// The first round's costliest statements (empty without
    /// pg_stat_statements).
    pub statements: Vec<StatementStat>,
    /// The quiet stores' p95 over the fair baseline's of the same round,
    /// the median over the rounds: a round that a busy machine slowed is
    /// outvoted instead of averaged in.
    pub quiet_p95_ratio: f64,
    /// The quiet stores' figures of each round, in round order.
    pub quiet_by_round: Vec<Percentiles>,
    /// The p95 ratio of each round, in round order.
    pub ratio_by_round: Vec<f64>,
    /// Each round's quiet p95 of its last third over its first third (by
    /// enqueue time, after the warm-up), in round order.
    pub trend_by_round: Vec<f64>,
    /// Each round's thirds (those the trend compares): the quiet p95,
    /// whole and split at the claim, in round order.
    pub thirds_by_round: Vec<Vec<Option<ThirdP95>>>,
    /// Sequential scans of `actions` per second during each round's load,
    /// one figure per poll interval, in round order.
    pub seq_scans_per_s_by_round: Vec<Vec<f64>>,
    /// The machine's and the server's CPU in each round's measured load.
    pub cpu_by_round: Vec<RoundCpu>,
    /// Where each round stalled: its worst second and how late the bench's
    /// runtime woke, in round order.
    pub stalls_by_round: Vec<RoundStalls>,
    /// The noisy stores' own latency (in the baseline: the same stores,
    /// sending like everyone else), medians over the rounds.
    pub noisy: Option<Percentiles>,
    pub actions: u64,
    /// Arrivals per second offered (actions enqueued over the load's length).
    pub offered_per_s: f64,
    /// Actions accepted per second, first enqueue to last acceptance.
    pub throughput_per_s: f64,
    /// Claim-to-settle time over worker capacity during the run.
    pub utilisation_measured: f64,
    /// Mean claim-to-settle time of an action.
    pub hold_mean_ms: f64,
    /// The latest an arrival was enqueued after its scheduled time.
    pub enqueue_lag_max_ms: f64,
    /// The quiet stores' p95 over time, by enqueue time, in the first round.
    pub timeline: Vec<crate::stats::TimePoint>,
    /// When the bursts were enqueued (bulk scenario), seconds after the start.
    pub bursts_s: Vec<f64>,
}

/// The verdict against the targets; the figures decide, not this crate.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessVerdict {
    /// Fair claiming kept the quiet stores' p95 within 10% of the fair
    /// baseline in every noisy scenario.
    pub fair_within_target: bool,
    /// The worst fair ratio of a noisy scenario.
    pub fair_ratio_worst: f64,
    /// FIFO's ratio in the bulk scenario (the harm fair claiming prevents).
    pub fifo_bulk_ratio: f64,
    /// Single rounds of fair claiming in a noisy scenario whose ratio to
    /// their own round's baseline is above the target, of all such rounds:
    /// the medians above can hide a round that collapsed.
    pub fair_rounds_above_target: usize,
    pub fair_rounds: usize,
    /// The worst single fair round of a noisy scenario.
    pub fair_round_ratio_worst: f64,
    /// The fair baseline's quiet p95 over FIFO's baseline (medians).
    pub baseline_vs_fifo: f64,
    /// The worst trend of a fair round (any scenario): last third's p95
    /// over the first third's.
    pub fair_trend_worst: f64,
    /// Sequential scans of `actions` per second in fair rounds: the highest
    /// poll interval, and the worst round's mean over its first and its last
    /// third of intervals.
    pub fair_seq_scans_per_s_max: f64,
    pub fair_seq_scans_first_third: f64,
    pub fair_seq_scans_last_third: f64,
    /// Every target of a judged shape: the fair ratios, the baseline
    /// against FIFO, no upward trend.
    pub within_targets: bool,
    /// The fair baseline could not keep up (accepted under 90% of the
    /// offered rate, or busier than 85%): the machine was too slow or too
    /// loaded for the planned load, and no figure of this run means much.
    pub overloaded: bool,
}

impl FairnessVerdict {
    /// The baseline against FIFO, the trend and the sequential scans.
    pub fn more_lines(&self) -> String {
        format!(
            "fair baseline p95 over FIFO's: {:.2}x (target <= {BASELINE_VS_FIFO_MAX:.2}x)\n\
             worst fair round, last third's p95 over the first third's: {:.2}x (target <= {TREND_MAX:.2}x)\n\
             sequential scans of actions per s in fair rounds: max {:.1}; worst round's first third {:.1}, last third {:.1}\n\
             every target: {}\n",
            self.baseline_vs_fifo,
            self.fair_trend_worst,
            self.fair_seq_scans_per_s_max,
            self.fair_seq_scans_first_third,
            self.fair_seq_scans_last_third,
            if self.within_targets { "met" } else { "NOT met" }
        )
    }

    /// The line that shows single rounds, which the medians can hide.
    pub fn rounds_line(&self) -> String {
        format!(
            "fair claiming, single rounds: {} of {} noisy rounds above {:.2}x (worst round {:.2}x)\n",
            self.fair_rounds_above_target,
            self.fair_rounds,
            FAIR_RATIO_MAX,
            self.fair_round_ratio_worst
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FairnessReport {
    pub seed: u64,
    pub settings: FairnessSettings,
    pub runs: Vec<FairnessRun>,
    pub verdict: FairnessVerdict,
    pub chart: Option<PathBuf>,
    pub wall_time_s: f64,
}

impl FairnessReport {
    pub fn run(&self, scenario: Scenario, claim: ClaimMode) -> Option<&FairnessRun> {
        self.runs
            .iter()
            .find(|r| r.scenario == scenario && r.claim == claim)
    }

    /// One line per fair round that trended above [`TREND_MAX`].
    pub fn trending_lines(&self) -> String {
        trending_lines(&self.runs)
    }

    /// The results as a text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        let c = &s.calibration;
        out.push_str(&format!(
            "capacity: {} workers x {} = {} slots · {:.0}/s offered x {:.1} ms per action ({}) = {:.0}% planned utilisation\n",
            c.workers,
            c.concurrency,
            c.slots,
            c.offered_hz,
            c.service_ms,
            match s.service_ms_measured {
                Some(_) => format!("measured by a {} s calibration run", s.calibration_s),
                None => format!("provider mean + {DB_ALLOWANCE_MS} ms allowance"),
            },
            c.utilisation_planned * 100.0
        ));
        out.push_str(&format!(
            "store_in_flight_max {} · claim batch {} · idle poll {} ms · synchronous_commit {}\n",
            s.store_in_flight_max, s.claim_batch_max, s.idle_poll_ms, s.synchronous_commit
        ));
        out.push_str(&format!(
            "{} round(s) of {} s per scenario and claim mode; latencies are the median over rounds, \
             ratios the median of each round's ratio to that round's fair baseline\n\n",
            s.rounds, s.duration_s
        ));
        out.push_str(&format!(
            "{:<26} {:<5} {:>9} {:>9} {:>9} {:>8} {:>11} {:>10} {:>9} {:>6}\n",
            "scenario",
            "claim",
            "quiet p50",
            "quiet p95",
            "quiet p99",
            "p95 vs",
            "to claim",
            "noisy p95",
            "accepted",
            "busy"
        ));
        out.push_str(&format!(
            "{:<26} {:<5} {:>9} {:>9} {:>9} {:>8} {:>11} {:>10} {:>9} {:>6}\n",
            "", "", "ms", "ms", "ms", "fair base", "p50/p95 ms", "ms", "per s", ""
        ));
        for r in &self.runs {
            out.push_str(&format!(
                "{:<26} {:<5} {:>9.1} {:>9.1} {:>9.1} {:>7.2}x {:>11} {:>10} {:>9.0} {:>5.0}%\n",
                r.label,
                claim_name(r.claim),
                r.quiet.p50_ms,
                r.quiet.p95_ms,
                r.quiet.p99_ms,
                r.quiet_p95_ratio,
                r.quiet_wait.map_or("-".to_string(), |w| format!(
                    "{:.1}/{:.1}",
                    w.p50_ms, w.p95_ms
                )),
                r.noisy
                    .map_or("-".to_string(), |n| format!("{:.1}", n.p95_ms)),
                r.throughput_per_s,
                r.utilisation_measured * 100.0
            ));
        }
        let v = &self.verdict;
        if v.overloaded {
            out.push_str(
                "\nWARNING: the fair baseline did not keep up with its load (overloaded): \
                 lower --rate-per-store or raise --concurrency; these figures measure a queue, not fairness\n",
            );
        }
        out.push_str(&format!(
            "\nfair claiming, noisy scenarios: worst quiet p95 ratio {:.2}x (target <= {:.2}x): {}\n",
            v.fair_ratio_worst,
            FAIR_RATIO_MAX,
            if v.fair_within_target { "met" } else { "NOT met" }
        ));
        out.push_str(&v.rounds_line());
        out.push_str(&format!(
            "FIFO, bulk: quiet p95 ratio {:.2}x (the harm fair claiming prevents)\n",
            v.fifo_bulk_ratio
        ));
        out.push_str(&v.more_lines());
        out.push_str(&self.trending_lines());
        for r in self
            .runs
            .iter()
            .filter(|r| r.scenario == Scenario::Baseline && !r.statements.is_empty())
        {
            // Per round: the statements are the first round's.
            let actions = r.actions / u64::from(self.settings.rounds).max(1);
            out.push_str(&crate::stats::statement_lines(
                &format!("{} {}", r.label, claim_name(r.claim)),
                &r.statements,
                actions,
            ));
        }
        out
    }
}

pub fn claim_name(c: ClaimMode) -> &'static str {
    match c {
        ClaimMode::Fair => "fair",
        ClaimMode::Fifo => "FIFO",
    }
}

/// Runs every scenario with both claim modes and writes the chart.
pub async fn run(cfg: &FairnessConfig) -> Result<FairnessReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let assumed = cfg.calibration().map_err(BenchError::Settings)?;
    Plan::new(cfg, assumed, cfg.duration_s)?;
    let started = Instant::now();
    let dir = run_dir("courier-bench-fairness-")?;
    let mut cluster = Cluster::new(dir.path().join("pg")).setting("synchronous_commit", "off");
    // Where each run's database time goes, when the server has it (as
    // `courier bench scale`): top-level statements only, planning too.
    let stat_statements = crate::throughput::statements_library_present();
    if stat_statements {
        cluster = cluster
            .setting("shared_preload_libraries", "pg_stat_statements")
            .setting("pg_stat_statements.track", "top")
            .setting("pg_stat_statements.track_planning", "on");
    }
    let c = cluster.clone();
    let url = tokio::task::spawn_blocking(move || c.start()).await??;
    let result = async {
        let statements = stat_statements && statements_enable(&url).await?;
        let mut fake = FakeConfig::new(dir.path().join("provider.jsonl"), API_KEY, SECRET);
        fake.faults = FaultRates::NONE;
        fake.latency = cfg.latency;
        fake.latency_subject = LatencySubject::Stated;
        fake.seed = cfg.seed;
        let provider = courier_fake::start(fake).await?;
        let ctx = Ctx {
            cfg,
            server_url: url.clone(),
            provider_url: provider.url(),
            statements,
            postmaster: cluster.postmaster_pid(),
        };
        let runs = async {
            let (calibration, measured) = calibration_run(&ctx, assumed).await?;
            let plan = Plan::new(cfg, calibration, cfg.duration_s)?;
            Ok::<_, BenchError>((all_runs(&ctx, &plan).await?, calibration, measured))
        }
        .await;
        provider.shutdown().await?;
        runs
    }
    .await;
    let c = cluster.clone();
    let stopped = tokio::task::spawn_blocking(move || c.stop(StopMode::Fast)).await?;
    let (runs, calibration, service_ms_measured) = result?;
    stopped?;
    let settings = FairnessSettings {
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
    };
    let verdict = verdict(&runs);
    let mut report = FairnessReport {
        seed: cfg.seed,
        settings,
        runs,
        verdict,
        chart: None,
        wall_time_s: 0.0,
    };
    report.wall_time_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// One line per fair round that trended above [`TREND_MAX`] (a NaN trend,
/// from a third without a quiet action, counts): its thirds and its worst
/// second, with the machine's stalls then.
fn trending_lines(runs: &[FairnessRun]) -> String {
    let mut out = String::new();
    for r in runs.iter().filter(|r| r.claim == ClaimMode::Fair) {
        for (i, trend) in r.trend_by_round.iter().enumerate() {
            if *trend <= TREND_MAX {
                continue;
            }
            out.push_str(&format!("  {} round {}: trend {trend:.2}x", r.label, i + 1));
            let thirds = r.thirds_by_round.get(i).map(Vec::as_slice);
            if let Some([Some(a), _, Some(c)]) = thirds {
                out.push_str(&format!(
                    " (wait p95 {:.1} -> {:.1} ms, after the claim {:.1} -> {:.1} ms)",
                    a.wait_ms, c.wait_ms, a.after_claim_ms, c.after_claim_ms
                ));
            }
            if let Some(w) = r
                .stalls_by_round
                .get(i)
                .and_then(|s| s.worst_second.as_ref())
            {
                out.push_str(&format!(
                    "; worst second {:.0} s: p95 {:.1} ms (wait {:.1}), runtime late {:.0} ms",
                    w.at_s, w.p95_ms, w.wait_p95_ms, w.runtime_late_max_ms
                ));
                if let Some(c) = w.cpu {
                    out.push_str(&format!(", CPUs {:.0}% busy", c.busy_share * 100.0));
                    if let Some(st) = c.stalls {
                        out.push_str(&format!(
                            ", stalled: cpu {:.0}%, io {:.0}% (full {:.0}%), memory {:.0}%",
                            st.cpu_some * 100.0,
                            st.io_some * 100.0,
                            st.io_full * 100.0,
                            st.memory_some * 100.0
                        ));
                    }
                }
            }
            out.push('\n');
        }
    }
    out
}

fn verdict(runs: &[FairnessRun]) -> FairnessVerdict {
    let fair_noisy: Vec<f64> = runs
        .iter()
        .filter(|r| r.claim == ClaimMode::Fair && r.scenario != Scenario::Baseline)
        .map(|r| r.quiet_p95_ratio)
        .collect();
    let worst = fair_noisy.iter().copied().fold(f64::NAN, f64::max);
    let fair_rounds: Vec<f64> = runs
        .iter()
        .filter(|r| r.claim == ClaimMode::Fair && r.scenario != Scenario::Baseline)
        .flat_map(|r| r.ratio_by_round.iter().copied())
        .collect();
    let overloaded = runs
        .iter()
        .find(|r| r.scenario == Scenario::Baseline && r.claim == ClaimMode::Fair)
        .is_some_and(|r| {
            r.throughput_per_s < 0.9 * r.offered_per_s || r.utilisation_measured > 0.85
        });
    let fair_within_target =
        !fair_noisy.is_empty() && fair_noisy.iter().all(|r| *r <= FAIR_RATIO_MAX);
    let p95_of = |scenario, claim| {
        runs.iter()
            .find(|r| r.scenario == scenario && r.claim == claim)
            .map_or(f64::NAN, |r| r.quiet.p95_ms)
    };
    let baseline_vs_fifo = ratio(
        p95_of(Scenario::Baseline, ClaimMode::Fair),
        p95_of(Scenario::Baseline, ClaimMode::Fifo),
    );
    let fair_runs = runs.iter().filter(|r| r.claim == ClaimMode::Fair);
    let fair_trend_worst = fair_runs
        .clone()
        .flat_map(|r| r.trend_by_round.iter().copied())
        .fold(f64::NAN, f64::max);
    let scans = seq_scan_thirds(fair_runs.flat_map(|r| r.seq_scans_per_s_by_round.iter()));
    FairnessVerdict {
        overloaded,
        within_targets: fair_within_target
            && baseline_vs_fifo <= BASELINE_VS_FIFO_MAX
            && fair_trend_worst <= TREND_MAX,
        baseline_vs_fifo,
        fair_trend_worst,
        fair_seq_scans_per_s_max: scans.0,
        fair_seq_scans_first_third: scans.1,
        fair_seq_scans_last_third: scans.2,
        fair_within_target,
        fair_ratio_worst: worst,
        fifo_bulk_ratio: runs
            .iter()
            .find(|r| r.claim == ClaimMode::Fifo && r.scenario == Scenario::Bulk)
            .map_or(f64::NAN, |r| r.quiet_p95_ratio),
        fair_rounds_above_target: fair_rounds.iter().filter(|x| **x > FAIR_RATIO_MAX).count(),
        fair_rounds: fair_rounds.len(),
        fair_round_ratio_worst: fair_rounds.iter().copied().fold(f64::NAN, f64::max),
    }
}

/// Of rounds' series of sequential scans per second: the highest figure,
/// and the first-third and last-third means of the round whose last third
/// rose most over its first.
fn seq_scan_thirds<'a>(rounds: impl Iterator<Item = &'a Vec<f64>>) -> (f64, f64, f64) {
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let mut out = (f64::NAN, f64::NAN, f64::NAN);
    for series in rounds {
        out.0 = series.iter().copied().fold(out.0, f64::max);
        let third = series.len() / 3;
        if third == 0 {
            continue;
        }
        let (first, last) = (
            mean(&series[..third]),
            mean(&series[series.len() - third..]),
        );
        if out.1.is_nan() || last - first > out.2 - out.1 {
            (out.1, out.2) = (first, last);
        }
    }
    out
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
    /// Sequential scans of `actions` per second, per poll during the load.
    seq_scans_per_s: Vec<f64>,
    /// The machine's and the server's CPU during the measured load.
    cpu: RoundCpu,
    stalls: RoundStalls,
}

impl FairnessRun {
    /// The machine's busy share (1.0: every core busy) during the measured
    /// load, the median over the rounds that read it; `None` if none did.
    pub fn machine_busy_share(&self) -> Option<f64> {
        let shares: Vec<f64> = self
            .cpu_by_round
            .iter()
            .filter_map(|r| r.load.map(|l| l.busy_share))
            .collect();
        (!shares.is_empty()).then(|| median(shares.iter().copied()))
    }
}

/// The CPU of one round's measured load (after the warm-up), whole and by
/// thirds (the thirds the trend compares); `None` where the readings did
/// not cover the span.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoundCpu {
    pub load: Option<cpu::SpanCpu>,
    pub thirds: Vec<Option<cpu::SpanCpu>>,
}

/// Where a round's quiet latency stalled, so that a trend can be traced to
/// the disk, memory, the CPUs or the bench's own runtime.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoundStalls {
    /// The second of the measured load (by enqueue time) with the highest
    /// quiet p95; `None` when no second had enough quiet actions.
    pub worst_second: Option<WorstSecond>,
    /// The latest the bench's runtime woke a timer asking every 10 ms, in
    /// each third of the measured load (0 when never more than 5 ms late).
    pub runtime_late_max_ms_by_third: Vec<f64>,
}

/// One second of a round, and what the machine did while its actions lived.
#[derive(Debug, Clone, Serialize)]
pub struct WorstSecond {
    /// Seconds after the load began.
    pub at_s: f64,
    pub count: usize,
    pub p95_ms: f64,
    /// Enqueue to claim.
    pub wait_p95_ms: f64,
    /// From the second's start to its end plus its p95: by then all but
    /// the slowest 5% of its actions were accepted (the span the next two
    /// figures cover).
    pub span_ms: f64,
    /// The machine's CPU and stalls over that span.
    pub cpu: Option<cpu::SpanCpu>,
    /// The latest the bench's runtime woke its timer in that span.
    pub runtime_late_max_ms: f64,
}

/// The worst second of `samples` (`(enqueued_ms, latency_us, wait_us)`)
/// within `[from_ms, to_ms)` by quiet p95, among seconds with at least
/// `samples_min` actions, with the machine's readings and the runtime's
/// lateness (`(at_ms, late_ms)`) over the span its actions lived.
fn worst_second(
    samples: &[(f64, u64, u64)],
    from_ms: f64,
    to_ms: f64,
    samples_min: usize,
    readings: &[cpu::Reading],
    late: &[(f64, f64)],
) -> Option<WorstSecond> {
    let mut bins: std::collections::BTreeMap<u64, Vec<(u64, u64)>> = Default::default();
    for &(at, us, wait) in samples {
        if at >= from_ms && at < to_ms {
            bins.entry((at / 1000.0) as u64)
                .or_default()
                .push((us, wait));
        }
    }
    let (second, p95, wait) = bins
        .into_iter()
        .filter(|(_, v)| v.len() >= samples_min.max(1))
        .filter_map(|(s, v)| {
            let p = Percentiles::from_us(v.iter().map(|x| x.0))?;
            let w = Percentiles::from_us(v.iter().map(|x| x.1))?;
            Some(((s, v.len()), p.p95_ms, w.p95_ms))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let start = second.0 as f64 * 1000.0;
    let span_ms = 1000.0 + p95;
    Some(WorstSecond {
        at_s: second.0 as f64,
        count: second.1,
        p95_ms: p95,
        wait_p95_ms: wait,
        span_ms,
        cpu: cpu::span(readings, start, start + span_ms, cpu::machine_cores()),
        runtime_late_max_ms: late_max(late, start, start + span_ms),
    })
}

/// The most late of `late` (`(at_ms, late_ms)`) within `[from_ms, to_ms)`.
fn late_max(late: &[(f64, f64)], from_ms: f64, to_ms: f64) -> f64 {
    late.iter()
        .filter(|(at, _)| *at >= from_ms && *at < to_ms)
        .map(|(_, l)| *l)
        .fold(0.0, f64::max)
}

/// Wakes every [`LATE_EVERY`] from now until `stop` and keeps each wake
/// more than [`LATE_NOTED_MS`] late: `(ms after t0 it was due, ms late)`. A
/// runtime whose threads are all blocked (a slow write, a long poll) wakes
/// it late.
fn runtime_lateness(
    t0: Instant,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Vec<(f64, f64)>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        loop {
            let due = Instant::now() + LATE_EVERY;
            tokio::select! {
                _ = stop.cancelled() => return out,
                _ = tokio::time::sleep_until(due.into()) => {}
            }
            let late_ms = due.elapsed().as_secs_f64() * 1000.0;
            if late_ms > LATE_NOTED_MS {
                out.push((t0.elapsed().as_secs_f64() * 1000.0 - late_ms, late_ms));
            }
        }
    })
}

/// Pools the rounds of one scenario and claim mode.
fn summarise(
    cfg: &FairnessConfig,
    plan: &Plan,
    scenario: Scenario,
    claim: ClaimMode,
    rounds: Vec<Samples>,
) -> Result<FairnessRun, BenchError> {
    let label = scenario.label(cfg.noisy_stores, cfg.noise_factor);
    let bin_ms = (plan.duration_s as f64 * 1000.0 / 60.0).max(1000.0);
    let timeline = rounds
        .first()
        .map(|r| timeline_p95(&r.quiet_timeline, bin_ms, 5))
        .unwrap_or_default();
    let quiet_by_round = rounds
        .iter()
        .map(|r| Percentiles::from_us(r.quiet_us.iter().copied()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            BenchError::Settings(format!(
                "{label} ({}): a round measured no quiet-store action; lengthen --duration-s or raise the rate",
                claim_name(claim)
            ))
        })?;
    let quiet = Percentiles::median_of(&quiet_by_round).ok_or_else(|| {
        BenchError::Settings(format!("{label} ({}): no round ran", claim_name(claim)))
    })?;
    let wait_by_round: Vec<Percentiles> = rounds
        .iter()
        .filter_map(|r| Percentiles::from_us(r.quiet_wait_us.iter().copied()))
        .collect();
    let quiet_wait = Percentiles::median_of(&wait_by_round);
    let noisy_by_round: Vec<Percentiles> = rounds
        .iter()
        .filter_map(|r| Percentiles::from_us(r.noisy_us.iter().copied()))
        .collect();
    let noisy = Percentiles::median_of(&noisy_by_round);
    let actions: u64 = rounds.iter().map(|r| r.actions).sum();
    let hold_us: u64 = rounds.iter().map(|r| r.hold_us_total).sum();
    let window_ms: f64 = rounds.iter().map(|r| r.window_ms).sum::<f64>().max(1.0);
    let load_s = (plan.duration_s * rounds.len().max(1) as u64) as f64;
    let bursts_s = if scenario == Scenario::Bulk {
        (0..cfg.noisy_stores)
            .flat_map(|i| cfg.shape().bursts(i))
            .map(|(at, _)| at / 1000.0)
            .collect()
    } else {
        Vec::new()
    };
    Ok(FairnessRun {
        scenario,
        label,
        claim,
        quiet,
        quiet_wait,
        statements: rounds
            .first()
            .map(|r| r.statements.clone())
            .unwrap_or_default(),
        quiet_p95_ratio: f64::NAN,
        quiet_by_round,
        ratio_by_round: Vec::new(),
        trend_by_round: rounds.iter().map(|r| r.trend).collect(),
        thirds_by_round: rounds.iter().map(|r| r.thirds.clone()).collect(),
        seq_scans_per_s_by_round: rounds.iter().map(|r| r.seq_scans_per_s.clone()).collect(),
        cpu_by_round: rounds.iter().map(|r| r.cpu.clone()).collect(),
        stalls_by_round: rounds.iter().map(|r| r.stalls.clone()).collect(),
        noisy,
        actions,
        offered_per_s: actions as f64 / load_s,
        throughput_per_s: actions as f64 * 1000.0 / window_ms,
        utilisation_measured: hold_us as f64
            / 1000.0
            / (f64::from(plan.calibration.slots) * window_ms),
        hold_mean_ms: hold_us as f64 / 1000.0 / actions.max(1) as f64,
        enqueue_lag_max_ms: rounds.iter().map(|r| r.lag_max_ms).fold(0.0, f64::max),
        timeline,
        bursts_s,
    })
}

/// Starts the plan's workers on `url`, each with its own provider client.
async fn start_workers(
    ctx: &Ctx<'_>,
    plan: &Plan,
    claim: ClaimMode,
    url: &str,
) -> Result<WorkerPool<ProviderClient>, BenchError> {
    let n = plan.calibration.workers;
    let clients = (0..n)
        .map(|_| {
            ProviderClient::new(ClientConfig {
                base_url: ctx.provider_url.clone(),
                api_key: API_KEY.into(),
                status_callback: None,
                timeout: Duration::from_millis(plan.limits.request_timeout_ms),
            })
            .map_err(|e| BenchError::Settings(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut wc = StoreConfig::new(url);
    wc.migrate = false;
    wc.pool_size_max = (plan.calibration.concurrency as usize + 2).min(16);
    let worker = bench_worker(
        plan.limits.clone(),
        claim,
        courier_dispatch::owner_name(),
        ctx.cfg.idle_poll_ms,
        ctx.cfg.seed,
    );
    // A clone of a client shares its connections; each worker gets its own
    // client, and the originals are dropped with `clients`.
    let provider = |i: u32| clients[i as usize].clone();
    Ok(WorkerPool::start(n, &wc, provider, &worker).await?)
}

/// One scenario with one claim mode, on a fresh database.
async fn run_one(
    ctx: &Ctx<'_>,
    plan: &Plan,
    claim: ClaimMode,
    schedule: &[Arrival],
    title: &str,
) -> Result<Samples, BenchError> {
    let cfg = ctx.cfg;
    let url = courier_store::database_recreate(&ctx.server_url, DATABASE).await?;
    let mut sc = StoreConfig::new(&url);
    sc.pool_size_max = 16;
    let store = PgStore::connect(&sc).await?;
    if ctx.statements {
        statements_reset(&ctx.server_url).await?;
    }

    // The workers, each with its own pool and provider client, like processes.
    let mut pool = start_workers(ctx, plan, claim, &url).await?;
    let bar = bar(
        cfg.progress,
        plan.duration_s,
        "{prefix} [{bar:30}] {pos}/{len} s {msg}",
    );
    bar.set_prefix(title.to_string());
    let enqueued = Arc::new(AtomicU64::new(0));
    let accepted = || pool.settled();

    // The open-loop load, with the sequential scans of `actions` polled
    // while it lasts (not while the queue drains: the drain's own progress
    // query counts actions by a scan).
    let poll_stop = CancellationToken::new();
    let poller = tokio::spawn(seq_scans_poll(store.clone(), poll_stop.clone()));
    let cpu_roles = cpu::Roles {
        postmaster: ctx.postmaster,
        bench: std::process::id(),
        ..cpu::Roles::default()
    };
    // The CPU and the runtime's lateness are read until the queue has
    // drained, so the last second's actions are covered while they live.
    let watch_stop = CancellationToken::new();
    let watch_guard = watch_stop.clone().drop_guard();
    let cpu_watch = cpu::watch(cpu_roles, CPU_READ_EVERY, watch_stop.clone());
    let late_watch = runtime_lateness(Instant::now(), watch_stop);
    let load_started = Instant::now();
    let generated = {
        let load = generate(&store, schedule, cfg, plan.duration_s, enqueued.clone());
        tokio::pin!(load);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                r = &mut load => break r,
                _ = tick.tick() => {
                    bar.set_position(load_started.elapsed().as_secs().min(plan.duration_s));
                    bar.set_message(format!(
                        "enqueued {} · accepted {}",
                        enqueued.load(Ordering::Relaxed),
                        accepted()
                    ));
                }
            }
        }
    };
    // The load lasts its whole duration, however early its last arrival
    // was enqueued.
    tokio::time::sleep_until((load_started + Duration::from_secs(plan.duration_s)).into()).await;
    poll_stop.cancel();
    let seq_scans_per_s = poller.await?;
    let lag_max_ms = match generated {
        Ok(v) => v,
        Err(e) => {
            let _ = pool.stop().await;
            bar.abandon();
            return Err(e);
        }
    };
    bar.set_position(plan.duration_s);

    // Let the queue drain, then stop the workers.
    let limit = Duration::from_secs(cfg.drain_timeout_s);
    let deadline = Instant::now() + limit;
    let drained = loop {
        let p = store.actions_progress().await?;
        bar.set_message(format!(
            "draining: {} open · accepted {}",
            p.open,
            accepted()
        ));
        if p.open == 0 {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(BenchError::Timeout {
                what: format!("draining the queue of {title}"),
                limit,
                detail: format!("{} of {} actions still open", p.open, p.total),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(watch_guard);
    let cpu_readings = cpu_watch.await?;
    let late = late_watch.await?;
    pool.stop().await?;
    bar.finish_with_message(format!("done · accepted {}", pool.settled()));
    drained?;

    let statements = if ctx.statements {
        statements_top(&ctx.server_url, DATABASE, STATEMENTS_MAX).await?
    } else {
        Vec::new()
    };
    let rows = store.latencies_enqueue_to_accepted().await?;
    let warmup_ms = cfg.warmup_s as f64 * 1000.0;
    let is_noisy = |s: &str| (0..cfg.noisy_stores).any(|i| store_name(i) == s);
    let mut quiet_us = Vec::new();
    let mut quiet_wait_us = Vec::new();
    let mut quiet_timeline = Vec::new();
    let mut quiet_split = Vec::new();
    let mut noisy_us = Vec::new();
    let (mut hold_us_total, mut last_ms) = (0u64, 0f64);
    let mut holds: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for r in &rows {
        hold_us_total += r.hold_us;
        let second = holds
            .entry((r.enqueued_ms.max(0.0) / 1000.0) as u64)
            .or_default();
        second.0 += r.hold_us;
        second.1 += 1;
        last_ms = last_ms.max(r.enqueued_ms + r.latency_us as f64 / 1000.0);
        if is_noisy(&r.store) {
            noisy_us.push(r.latency_us);
        } else {
            quiet_timeline.push((r.enqueued_ms, r.latency_us));
            quiet_split.push((r.enqueued_ms, r.latency_us, r.wait_us));
            if r.enqueued_ms >= warmup_ms {
                quiet_us.push(r.latency_us);
                quiet_wait_us.push(r.wait_us);
            }
        }
    }
    let load_end_ms = plan.duration_s as f64 * 1000.0;
    let trend = trend_ratio(&quiet_timeline, warmup_ms, load_end_ms);
    let thirds = thirds_p95(&quiet_split, warmup_ms, load_end_ms);
    let cores = cpu::machine_cores();
    let third_ms = (load_end_ms - warmup_ms) / 3.0;
    let cpu = RoundCpu {
        load: cpu::span(&cpu_readings, warmup_ms, load_end_ms, cores),
        thirds: (0..3)
            .map(|i| {
                let from = warmup_ms + third_ms * f64::from(i);
                cpu::span(&cpu_readings, from, from + third_ms, cores)
            })
            .collect(),
    };
    let stalls = RoundStalls {
        worst_second: worst_second(
            &quiet_split,
            warmup_ms,
            load_end_ms,
            WORST_SECOND_SAMPLES_MIN,
            &cpu_readings,
            &late,
        ),
        runtime_late_max_ms_by_third: (0..3)
            .map(|i| {
                let from = warmup_ms + third_ms * f64::from(i);
                late_max(&late, from, from + third_ms)
            })
            .collect(),
    };
    Ok(Samples {
        trend,
        thirds,
        cpu,
        stalls,
        seq_scans_per_s,
        statements,
        quiet_us,
        quiet_wait_us,
        quiet_timeline,
        noisy_us,
        actions: rows.len() as u64,
        hold_us_total,
        hold_ms_by_second: holds
            .values()
            .map(|(us, n)| *us as f64 / 1000.0 / (*n).max(1) as f64)
            .collect(),
        window_ms: last_ms.max(1.0),
        lag_max_ms,
    })
}

/// Sequential scans of `actions` per second over each [`SCAN_POLL`] until
/// `stop`. A failed read ends the series early (it is a measurement, not the
/// run's work).
async fn seq_scans_poll(store: PgStore, stop: CancellationToken) -> Vec<f64> {
    let mut rates = Vec::new();
    let mut last: Option<(Instant, i64)> = None;
    loop {
        let Ok(scans) = store.table_scans("actions").await else {
            return rates;
        };
        let now = Instant::now();
        if let Some((t, n)) = last {
            let s = now.duration_since(t).as_secs_f64().max(1e-3);
            rates.push((scans.seq_scan - n) as f64 / s);
        }
        last = Some((now, scans.seq_scan));
        tokio::select! {
            _ = stop.cancelled() => return rates,
            _ = tokio::time::sleep(SCAN_POLL) => {}
        }
    }
}

/// Enqueues the schedule open-loop: each arrival at its time, without
/// waiting for earlier ones (up to `enqueue_in_flight_max` at once). Returns
/// the largest lag behind schedule, in ms.
async fn generate(
    store: &PgStore,
    schedule: &[Arrival],
    cfg: &FairnessConfig,
    duration_s: u64,
    enqueued: Arc<AtomicU64>,
) -> Result<f64, BenchError> {
    let permits = Arc::new(Semaphore::new(cfg.enqueue_in_flight_max));
    let mut tasks = tokio::task::JoinSet::new();
    let start = tokio::time::Instant::now();
    let mut lag_max_ms = 0f64;
    for a in schedule {
        let due = start + Duration::from_secs_f64(a.at_ms / 1000.0);
        tokio::time::sleep_until(due).await;
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| BenchError::Task(e.to_string()))?;
        lag_max_ms = lag_max_ms.max(due.elapsed().as_secs_f64() * 1000.0);
        // Collect finished enqueues as we go, so errors surface early.
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
        let a = *a;
        let store = store.clone();
        let name = store_name(a.store);
        let count = a.count;
        let enqueued = enqueued.clone();
        tasks.spawn(async move {
            let _permit = permit;
            if count == 1 {
                // Named by the store and the arrival's place among its
                // store's: the same message in every run of a round.
                let mut body = format!("bench message {} of {}", a.ordinal, a.store);
                if let Some(ms) = a.latency_ms {
                    body.push_str(&format!(" [latency {ms} ms]"));
                }
                let new = NewAction {
                    store: name,
                    to: format!("+1555{:07}", a.store % 10_000_000),
                    body,
                    key: None,
                };
                store.action_enqueue(&new).await.map_err(|e| match e {
                    courier_store::EnqueueError::Store(s) => BenchError::Store(s),
                    other => BenchError::Task(other.to_string()),
                })?;
            } else {
                store.actions_enqueue_bulk(&[name], count).await?;
            }
            enqueued.fetch_add(u64::from(count), Ordering::Relaxed);
            Ok::<(), BenchError>(())
        });
    }
    // The load lasts the whole duration even when the last arrival is early.
    tokio::time::sleep_until(start + Duration::from_secs(duration_s)).await;
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(lag_max_ms)
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
        let w = worst_second(&samples, 1_000.0, 5_000.0, 20, &readings, &late).expect("judged");
        assert_eq!(w.at_s, 2.0);
        assert_eq!(w.count, 30);
        assert!(
            w.p95_ms > 200.0 && (w.wait_p95_ms - 150.0).abs() < 0.5,
            "{w:?}"
        );
        // Its span runs from 2.0 s until its p95 action was accepted.
        assert!((w.span_ms - (1_000.0 + w.p95_ms)).abs() < 1e-9);
        assert_eq!(w.runtime_late_max_ms, 180.0);
        let stalls = w.cpu.and_then(|c| c.stalls).expect("read");
        assert!(
            (stalls.io_some - 0.6 / (w.span_ms / 1_000.0)).abs() < 0.05,
            "{stalls:?}"
        );
        // A slower second outside the window is not judged...
        let later = worst_second(&samples, 3_000.0, 5_000.0, 20, &readings, &late).expect("judged");
        assert_eq!(later.at_s, 3.0);
        // ...nor a second with fewer actions than asked for.
        assert!(worst_second(&samples, 0.0, 5_000.0, 31, &readings, &late).is_none());
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
                    runtime_late_max_ms: 180.0,
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
