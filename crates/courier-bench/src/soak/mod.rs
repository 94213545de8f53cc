//! `courier bench soak`: a long run at a steady share of capacity with
//! pruning on and a short retention, to show that nothing grows with time:
//! the courier's table and index bytes, the claim statement's p99 and the
//! workers' resident memory, the last third of the run against the first.
//!
//! Real processes: one `courier serve` (the provider's webhooks) and
//! `courier worker`s (pruning by themselves, each serving its metrics), all
//! children of this process; the fake provider runs in-process with its
//! key retention below the courier's action retention; the load is enqueued
//! open-loop at `utilisation` x the capacity a probe measured first, through
//! to the final status (settled, and the webhooks merged).
//!
//! # Invariants
//! - The measured span starts after a warm-up of one action retention and a
//!   minute, so both thirds compare a steady state (the tables fill up for
//!   one retention before anything is old enough to prune).
//! - The claim p99 of a span comes from the sum of the workers' histogram
//!   bucket counts over that span (Prometheus buckets, interpolated inside
//!   the bucket), not from an average of percentiles.
//! - A run counts only if the fleet kept up: no sample of the last third
//!   holds more pending actions, nor more intents without a final status,
//!   than [`KEPT_UP_S`] of the load.
//! - A third's claim p99 and cores cover the intervals that end at its
//!   samples (from the sample before its first); its enqueues and
//!   statements cover its own span. Over a 30-minute run the two differ by
//!   one sample interval.

mod report;

pub use report::*;

use crate::cpu::{Cores, Roles, Ticks, STEAL_MAX_CORES};
use crate::harness::server::{with_cluster, Statements};
use crate::history_views::HistoryViews;
use crate::views::{statements_enable, statements_reset, statements_top, StatementStat};
use crate::{bar, run_dir, BenchError};
use courier_fake::{FakeConfig, FaultRates, Latency};
use courier_store::cluster::Cluster;
use courier_store::{PgStore, StoreConfig};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const API_KEY: &str = "soak-key";
const SOAK_DB: &str = "courier_soak";
/// Statements listed per third.
const STATEMENTS_MAX: i64 = 12;
const SECRET: &str = "soak-secret";

#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The `courier` binary, started as `serve` and `worker` children.
    pub exe: PathBuf,
    /// The measured span (after the warm-up).
    pub duration_s: u64,
    pub sample_interval_s: u64,
    /// The share of the probed capacity offered.
    pub utilisation: f64,
    /// Offer this rate instead of probing the capacity.
    pub rate_per_s: Option<f64>,
    pub probe_actions: u32,
    pub workers: u32,
    pub concurrency: u32,
    pub stores: u32,
    pub action_retention_s: u64,
    /// The fake provider's key retention (below the action retention).
    pub key_retention_s: u64,
    pub webhook_retry_horizon_s: u64,
    pub webhook_event_retention_s: u64,
    pub event_retention_s: u64,
    pub prune_interval_ms: u64,
    pub latency: Latency,
    pub seed: u64,
    /// Record the statements' time per third with pg_stat_statements (when
    /// the server has it): what the database did more of, if the last third
    /// cost more. Off by default: it costs the server some time itself.
    pub statements: bool,
    pub progress: bool,
}

impl SoakConfig {
    pub fn new(exe: PathBuf) -> Self {
        SoakConfig {
            exe,
            duration_s: 1_800,
            sample_interval_s: 10,
            utilisation: 0.65,
            rate_per_s: None,
            probe_actions: 4_000,
            workers: 2,
            concurrency: 32,
            stores: 100,
            action_retention_s: 300,
            key_retention_s: 120,
            webhook_retry_horizon_s: 60,
            webhook_event_retention_s: 120,
            event_retention_s: 300,
            prune_interval_ms: 1_000,
            latency: Latency::LogNormal {
                median_ms: 25.0,
                sigma: 0.5,
            },
            seed: 1,
            statements: false,
            progress: true,
        }
    }

    /// Seconds, a tiny load: checks that everything runs, judges nothing.
    pub fn smoke(exe: PathBuf) -> Self {
        SoakConfig {
            duration_s: 6,
            sample_interval_s: 1,
            probe_actions: 200,
            action_retention_s: 3,
            key_retention_s: 2,
            webhook_retry_horizon_s: 1,
            webhook_event_retention_s: 2,
            event_retention_s: 3,
            prune_interval_ms: 200,
            progress: false,
            ..Self::new(exe)
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.duration_s < 3
            || self.sample_interval_s == 0
            || self.sample_interval_s * 3 > self.duration_s
        {
            return Err("duration_s must hold at least three samples".into());
        }
        if !(0.05..=1.0).contains(&self.utilisation) {
            return Err("utilisation must be within 0.05..=1".into());
        }
        if self.key_retention_s >= self.action_retention_s {
            return Err("the provider's key retention must be below the action retention".into());
        }
        if self.workers == 0 || self.concurrency == 0 || self.stores == 0 || self.probe_actions == 0
        {
            return Err("workers, concurrency, stores and probe actions must be positive".into());
        }
        if self
            .rate_per_s
            .is_some_and(|r| !(r > 0.0 && r <= 100_000.0))
        {
            return Err("rate must be within (0, 100000] per second".into());
        }
        Ok(())
    }

    fn warmup_s(&self) -> u64 {
        self.action_retention_s + self.sample_interval_s.max(60).min(self.action_retention_s)
    }
}

/// A child process, killed when dropped.
struct Proc {
    child: Child,
    pid: u32,
    metrics: Option<String>,
}

pub async fn run(cfg: &SoakConfig) -> Result<SoakReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let started = Instant::now();
    let dir = run_dir("courier-bench-soak-")?;
    let cluster = Cluster::new(dir.path().join("pg")).setting("synchronous_commit", "off");
    let track = if cfg.statements {
        Statements::All { planning: false }
    } else {
        Statements::Off
    };
    let mut report = with_cluster(cluster, track, async |server| {
        run_on(cfg, &server.url, dir.path(), server.postmaster).await
    })
    .await?;
    report.wall_time_s = started.elapsed().as_secs_f64();
    Ok(report)
}

async fn run_on(
    cfg: &SoakConfig,
    server_url: &str,
    dir: &Path,
    postmaster: Option<u32>,
) -> Result<SoakReport, BenchError> {
    let url = courier_store::database_recreate(server_url, SOAK_DB).await?;
    let mut sc = StoreConfig::new(&url);
    sc.pool_size_max = 4;
    let store = PgStore::connect(&sc).await?;
    let (server, api) = spawn_serve(cfg, &url, dir).await?;
    let mut fake = FakeConfig::new(dir.join("provider.jsonl"), API_KEY, SECRET);
    fake.faults = FaultRates::NONE;
    fake.latency = cfg.latency;
    fake.seed = cfg.seed;
    fake.key_retention_ms = cfg.key_retention_s * 1000;
    fake.default_callback = Some(format!("{api}/v1/webhooks/provider"));
    let provider = courier_fake::start(fake).await?;
    let mut workers = Vec::new();
    for i in 0..cfg.workers {
        workers.push(spawn_worker(cfg, &url, &provider.url(), &api, dir, i).await?);
    }
    let roles = Roles {
        workers: workers.iter().map(|w| w.pid).collect(),
        serve: Some(server.pid),
        postmaster,
        bench: std::process::id(),
    };
    let stores: Vec<String> = (0..cfg.stores).map(|i| format!("store-{i:03}")).collect();
    let (rate, capacity, probe_cores) = match cfg.rate_per_s {
        Some(r) => (r, None, None),
        None => {
            let (before, t) = (roles.read(), Instant::now());
            let c = probe(cfg, &store, &stores).await?;
            let cores = Cores::between(&before, &roles.read(), t.elapsed().as_secs_f64());
            (c * cfg.utilisation, Some(c), cores)
        }
    };
    let statements = cfg.statements && statements_enable(server_url).await?;
    let statements_at = statements.then_some(server_url);
    let run = sustained(cfg, &store, &stores, &workers, &roles, statements_at, rate).await;
    for mut w in workers {
        let _ = w.child.kill().await;
    }
    let mut server = server;
    let _ = server.child.kill().await;
    provider.shutdown().await?;
    let series = run?;
    let mut report = judge(cfg, series.samples, rate, capacity, series.enqueued);
    report.probe_cores = probe_cores;
    let [first, last] = series.thirds;
    (report.first.enqueued, report.first.statements) = first;
    (report.last.enqueued, report.last.statements) = last;
    Ok(report)
}

async fn spawn_serve(
    cfg: &SoakConfig,
    url: &str,
    dir: &Path,
) -> Result<(Proc, String), BenchError> {
    let log = std::fs::File::create(dir.join("serve.log"))?;
    let mut child = Command::new(&cfg.exe)
        .args([
            "serve",
            "--database-url",
            url,
            "--listen",
            "127.0.0.1:0",
            "--webhook-secret",
            SECRET,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().unwrap_or(0);
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| BenchError::Task("serve has no stdout".into()))?;
    let mut lines = BufReader::new(stdout).lines();
    let api = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await? {
            if let Some(i) = line.find("listening on ") {
                return Ok(line[i + "listening on ".len()..].trim().to_string());
            }
        }
        Err(BenchError::Task(
            "courier serve exited before listening; see serve.log".into(),
        ))
    })
    .await
    .map_err(|_| BenchError::Task("courier serve did not listen within 60 s".into()))??;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((
        Proc {
            child,
            pid,
            metrics: None,
        },
        api,
    ))
}

async fn spawn_worker(
    cfg: &SoakConfig,
    url: &str,
    provider: &str,
    api: &str,
    dir: &Path,
    i: u32,
) -> Result<Proc, BenchError> {
    let log_path = dir.join(format!("worker-{i}.log"));
    let log = std::fs::File::create(&log_path)?;
    let callback = format!("{api}/v1/webhooks/provider");
    let mut args: Vec<String> = ["worker", "--metrics-listen", "127.0.0.1:0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for (flag, value) in [
        ("--database-url", url.to_string()),
        ("--provider-url", provider.to_string()),
        ("--provider-api-key", API_KEY.to_string()),
        ("--callback-url", callback),
        ("--concurrency", cfg.concurrency.to_string()),
        ("--key-retention-s", cfg.key_retention_s.to_string()),
        ("--action-retention-s", cfg.action_retention_s.to_string()),
        (
            "--webhook-retry-horizon-s",
            cfg.webhook_retry_horizon_s.to_string(),
        ),
        (
            "--webhook-event-retention-s",
            cfg.webhook_event_retention_s.to_string(),
        ),
        ("--event-retention-s", cfg.event_retention_s.to_string()),
        ("--prune-interval-ms", cfg.prune_interval_ms.to_string()),
        ("--seed", (cfg.seed + u64::from(i)).to_string()),
    ] {
        args.push(flag.to_string());
        args.push(value);
    }
    let child = Command::new(&cfg.exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some(i) = text.find("metrics on http://") {
            let rest = &text[i + "metrics on ".len()..];
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let metrics = Some(rest[..end].to_string());
            return Ok(Proc {
                child,
                pid,
                metrics,
            });
        }
        if Instant::now() > deadline {
            return Err(BenchError::Task(format!(
                "worker {i} did not serve its metrics; see {}",
                log_path.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Enqueues `probe_actions` at once and times them to their final status:
/// settled, and the provider's webhooks merged. Answers actions per second
/// through the whole path. (Until session 17 it stopped at the settles,
/// with the webhooks still queued at the provider: 1,060/s on a fleet whose
/// webhooks then fell 15-35 s behind at 65% of it.)
async fn probe(cfg: &SoakConfig, store: &PgStore, stores: &[String]) -> Result<f64, BenchError> {
    let t = Instant::now();
    store
        .actions_enqueue_bulk(stores, cfg.probe_actions)
        .await?;
    let deadline = t + Duration::from_secs(600);
    loop {
        let c = store.counts().await?;
        if c.get("actions.pending") + c.get("actions.claimed") + c.open_intents() == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Task(
                "the capacity probe did not finish in 600 s".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(f64::from(cfg.probe_actions) / t.elapsed().as_secs_f64())
}

/// What the sustained load produced.
struct Series {
    samples: Vec<SoakSample>,
    enqueued: u64,
    /// Of the first and the last third: actions enqueued, and the costliest
    /// statements (empty unless recorded).
    thirds: [(u64, Vec<StatementStat>); 2],
}

/// The warm-up and the measured span: open-loop enqueues at `rate`,
/// a sample every interval, and the statements of the first and the last
/// third of [`SOAK_DB`] when the server to read them from is given.
async fn sustained(
    cfg: &SoakConfig,
    store: &PgStore,
    stores: &[String],
    workers: &[Proc],
    roles: &Roles,
    statements_at: Option<&str>,
    rate: f64,
) -> Result<Series, BenchError> {
    let warmup = Duration::from_secs(cfg.warmup_s());
    let total = warmup + Duration::from_secs(cfg.duration_s);
    let b = bar(
        cfg.progress,
        total.as_secs(),
        "soak [{bar:30}] {pos}/{len} s {msg}",
    );
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    let tick = Duration::from_millis(100);
    let interval = Duration::from_secs(cfg.sample_interval_s);
    let (mut owed, mut enqueued) = (0.0f64, 0u64);
    let mut owed_since = t0;
    let mut next_sample = t0;
    let mut samples = Vec::new();
    let mut edges = ThirdEdges::new(warmup.as_secs_f64(), cfg.duration_s);
    while t0.elapsed() < total {
        edges
            .pass(t0.elapsed().as_secs_f64(), enqueued, statements_at)
            .await?;
        // Owed by the time passed, not by ticks: a pass that took longer
        // than a tick (a sample, a statements read) must not lose load.
        let now = Instant::now();
        owed += rate * (now - owed_since).as_secs_f64();
        owed_since = now;
        let n = owed.floor() as u32;
        if n > 0 {
            enqueued += store.actions_enqueue_bulk(stores, n).await?;
            owed -= f64::from(n);
        }
        if Instant::now() >= next_sample {
            let t_s = t0.elapsed().as_secs_f64() - warmup.as_secs_f64();
            let s = sample(store, workers, roles, &http, t_s).await?;
            b.set_message(format!(
                "{:.0} MB, {} actions, {} pending",
                s.tables_mb, s.actions, s.pending
            ));
            samples.push(s);
            next_sample += interval;
        }
        b.set_position(t0.elapsed().as_secs());
        let next_tick = t0 + tick * ((t0.elapsed().as_millis() / tick.as_millis()) as u32 + 1);
        tokio::time::sleep_until(next_tick.into()).await;
    }
    b.finish();
    let thirds = edges.finish(enqueued, statements_at).await?;
    Ok(Series {
        samples,
        enqueued,
        thirds,
    })
}

#[derive(Clone, Copy)]
enum Edge {
    Start(usize),
    End(usize),
}

/// The compared thirds' edges, passed in the order they come: the load
/// each third enqueued, and its statements, read at its end.
struct ThirdEdges {
    /// (seconds into the run, what happens there).
    edges: [(f64, Edge); 3],
    next: usize,
    thirds: [(u64, Vec<StatementStat>); 2],
    enqueued_at_start: [u64; 2],
}

impl ThirdEdges {
    fn new(warmup_s: f64, duration_s: u64) -> Self {
        let third_s = duration_s as f64 / 3.0;
        ThirdEdges {
            edges: [
                (warmup_s, Edge::Start(0)),
                (warmup_s + third_s, Edge::End(0)),
                (warmup_s + 2.0 * third_s, Edge::Start(1)),
            ],
            next: 0,
            thirds: Default::default(),
            enqueued_at_start: [0; 2],
        }
    }

    /// Acts on every edge up to `elapsed_s`.
    async fn pass(
        &mut self,
        elapsed_s: f64,
        enqueued: u64,
        statements_at: Option<&str>,
    ) -> Result<(), BenchError> {
        while self.next < self.edges.len() && elapsed_s >= self.edges[self.next].0 {
            match self.edges[self.next].1 {
                Edge::Start(i) => {
                    self.enqueued_at_start[i] = enqueued;
                    if let Some(server_url) = statements_at {
                        statements_reset(server_url).await?;
                    }
                }
                Edge::End(i) => self.end(i, enqueued, statements_at).await?,
            }
            self.next += 1;
        }
        Ok(())
    }

    async fn end(
        &mut self,
        i: usize,
        enqueued: u64,
        statements_at: Option<&str>,
    ) -> Result<(), BenchError> {
        self.thirds[i].0 = enqueued - self.enqueued_at_start[i];
        if let Some(server_url) = statements_at {
            self.thirds[i].1 = statements_top(server_url, SOAK_DB, STATEMENTS_MAX).await?;
        }
        Ok(())
    }

    /// Ends the last third at the run's end.
    async fn finish(
        mut self,
        enqueued: u64,
        statements_at: Option<&str>,
    ) -> Result<[(u64, Vec<StatementStat>); 2], BenchError> {
        self.end(1, enqueued, statements_at).await?;
        Ok(self.thirds)
    }
}

async fn sample(
    store: &PgStore,
    workers: &[Proc],
    roles: &Roles,
    http: &reqwest::Client,
    t_s: f64,
) -> Result<SoakSample, BenchError> {
    let ticks = roles.read();
    let tables = store.tables_bytes().await?;
    let counts = store.counts().await?;
    let actions: i64 = counts.under("actions.").iter().map(|(_, n)| n).sum();
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut rss_kib = 0u64;
    for w in workers {
        rss_kib += rss_kib_of(w.pid).unwrap_or(0);
        if let Some(url) = &w.metrics {
            let text = match http.get(url).timeout(Duration::from_secs(5)).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            add_buckets(&mut buckets, &claim_buckets(&text));
        }
    }
    Ok(SoakSample {
        t_s,
        tables_mb: tables as f64 / 1_048_576.0,
        claim_p99_ms: None,
        worker_rss_mb: rss_kib as f64 / 1024.0 / workers.len().max(1) as f64,
        actions,
        pending: counts.get("actions.pending"),
        open_intents: counts.open_intents(),
        load_average: crate::cpu::load_average(),
        claim_buckets: buckets,
        cores: None,
        ticks,
    })
}

fn rss_kib_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The cumulative buckets of `courier_claim_duration_seconds` in a
/// Prometheus text: `(le, count)`, `+Inf` as infinity.
pub fn claim_buckets(text: &str) -> Vec<(f64, u64)> {
    let prefix = "courier_claim_duration_seconds_bucket{";
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count = l.rsplit(' ').next()?.parse::<f64>().ok()? as u64;
            Some((le, count))
        })
        .collect()
}

fn add_buckets(into: &mut Vec<(f64, u64)>, more: &[(f64, u64)]) {
    for (le, n) in more {
        match into.iter_mut().find(|(l, _)| l == le) {
            Some((_, c)) => *c += n,
            None => into.push((*le, *n)),
        }
    }
    into.sort_by(|a, b| a.0.total_cmp(&b.0));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_interpolates_inside_its_bucket_over_the_span() {
        let before = vec![(0.001, 10), (0.01, 20), (f64::INFINITY, 20)];
        // 140 more: 50 under 1 ms, 90 in 1-10 ms: rank 138.6 is 88.6 of
        // the 90 into the 1-10 ms bucket.
        let after = vec![(0.001, 60), (0.01, 160), (f64::INFINITY, 160)];
        let p = p99_between(&before, &after).unwrap();
        assert!((p - (1.0 + 9.0 * 88.6 / 90.0)).abs() < 1e-6, "{p}");
        // Past the last finite bucket: its edge, the most that is known.
        let slow = vec![(0.001, 10), (0.01, 20), (f64::INFINITY, 120)];
        assert_eq!(p99_between(&before, &slow), Some(10.0));
        assert_eq!(p99_between(&after, &after), None);
    }

    fn sample(t_s: f64, pending: i64, claims: u64) -> SoakSample {
        SoakSample {
            t_s,
            tables_mb: 100.0,
            claim_p99_ms: None,
            worker_rss_mb: 20.0,
            actions: 10_000,
            pending,
            open_intents: pending / 2,
            load_average: String::new(),
            claim_buckets: vec![(0.01, claims), (f64::INFINITY, claims)],
            cores: None,
            ticks: Ticks::default(),
        }
    }

    #[test]
    fn a_fleet_that_falls_behind_fails_the_soak_whatever_its_other_figures() {
        let mut cfg = SoakConfig::smoke(PathBuf::from("courier"));
        cfg.duration_s = 90;
        // A warm-up sample, then one every 10 s of the span.
        let run = |pending_at: fn(f64) -> i64| {
            let samples = (-1..10)
                .map(|k: i32| {
                    let t = f64::from(k) * 10.0;
                    sample(t, pending_at(t).max(0), 100 * (k + 2) as u64)
                })
                .collect();
            judge(&cfg, samples, 50.0, None, 5_000)
        };
        let steady = run(|_| 30);
        assert!(steady.kept_up && steady.passed, "{}", steady.table());
        assert_eq!(steady.pending_limit, 500.0);
        // The same sizes, memory and claim times, with the backlog growing.
        let behind = run(|t| (t * 20.0) as i64);
        assert_eq!(behind.last.pending_max, 1_800);
        assert!(!behind.kept_up && !behind.passed, "{}", behind.table());
        assert!(behind.table().contains("NO: the figures measure a queue"));
        // Claims keep up but the webhooks fall behind: a queue too.
        let mut late = run(|_| 30);
        for s in &mut late.samples {
            s.open_intents = (s.t_s * 20.0) as i64;
        }
        let late = judge(&cfg, late.samples, 50.0, None, 5_000);
        assert_eq!(late.last.open_intents_max, 1_800);
        assert!(!late.kept_up && !late.passed, "{}", late.table());
    }

    #[test]
    fn a_host_that_takes_cpu_away_in_a_third_spoils_the_comparison() {
        let mut cfg = SoakConfig::smoke(PathBuf::from("courier"));
        cfg.duration_s = 30;
        // Steal ticks grow by `steal_per_10s` in every interval from t.
        let run = |from_t: f64, steal_per_10s: u64| {
            let mut steal = 0;
            let samples = (-1..4)
                .map(|k: i32| {
                    let t = f64::from(k) * 10.0;
                    let mut s = sample(t, 0, 100 * (k + 2) as u64);
                    if t > from_t {
                        steal += steal_per_10s;
                    }
                    s.ticks = Ticks {
                        steal,
                        ..Ticks::default()
                    };
                    s
                })
                .collect();
            judge(&cfg, samples, 50.0, None, 5_000)
        };
        let quiet = run(0.0, 0);
        assert!(quiet.host_steady && quiet.passed, "{}", quiet.table());
        // 0.05 cores is 50 ticks in 10 s: at the limit, still steady.
        assert!(run(15.0, 50).host_steady);
        let noisy = run(15.0, 90);
        assert!(noisy.kept_up && !noisy.host_steady && !noisy.passed);
        assert!(
            noisy
                .table()
                .contains("NO: the host took CPU (steal 0.00 and 0.09"),
            "{}",
            noisy.table()
        );
    }

    #[test]
    fn each_interval_gets_the_cores_used_since_the_sample_before() {
        let mut cfg = SoakConfig::smoke(PathBuf::from("courier"));
        cfg.duration_s = 30;
        // Postgres uses 0.5 core in the interval that ends at the first
        // third's sample (t = 0) and 1.5 in the two that end at the last
        // third's (t = 20 and 30).
        let samples = (-1..4)
            .map(|k: i32| {
                let mut s = sample(f64::from(k) * 10.0, 0, 100 * (k + 2) as u64);
                let pg: u64 = [0, 500, 1_000, 2_500, 4_000][(k + 1) as usize];
                s.ticks = Ticks {
                    postgres: pg,
                    machine_busy: pg + 100 * (k + 1) as u64,
                    ..Ticks::default()
                };
                s
            })
            .collect();
        let r = judge(&cfg, samples, 50.0, None, 5_000);
        assert_eq!(r.samples[0].cores, None);
        assert_eq!(r.first.cores.postgres, 0.5);
        assert_eq!(r.last.cores.postgres, 1.5);
        assert!(
            (r.last.cores.other - 0.1).abs() < 1e-9,
            "{:?}",
            r.last.cores
        );
        assert!(
            r.table()
                .contains("| last third | 0.00 / 0.00 / 1.50 / 0.00 / 0.10, 0.00 | 1.60 |"),
            "{}",
            r.table()
        );
    }

    #[test]
    fn buckets_are_read_from_the_prometheus_text() {
        let text = "# TYPE courier_claim_duration_seconds histogram\n\
courier_claim_duration_seconds_bucket{le=\"0.001\"} 5\n\
courier_claim_duration_seconds_bucket{le=\"+Inf\"} 7\n\
courier_claim_duration_seconds_sum 0.01\n";
        assert_eq!(claim_buckets(text), vec![(0.001, 5), (f64::INFINITY, 7)]);
    }
}
