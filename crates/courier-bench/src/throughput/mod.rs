//! `courier bench throughput`: how fast is it, and how far from what this
//! PostgreSQL can do on this machine?
//!
//! In one run, for `synchronous_commit` on (the default) and off, on a
//! PostgreSQL cluster of its own:
//! - **ceiling**: `pgbench` with a claim-and-complete script (a table of
//!   jobs; each transaction claims the oldest pending job `FOR UPDATE SKIP
//!   LOCKED` and marks it done);
//! - **claim to settle**: a backlog worked by in-process workers whose
//!   provider is an in-process stub that accepts at once (claim, intent,
//!   attempt, send, settle; no HTTP);
//! - **end to end**: the same backlog through the whole protocol: the fake
//!   provider over HTTP (faults off, latency zero) and its status webhooks
//!   merged by the webhook API until every action is done.
//!
//! For each path: actions per second, transactions per action (commits of
//! the database counted by the server, `pg_stat_database`), where the
//! database time goes (`pg_stat_statements`, when the server can load it),
//! and the peak resident memory of this process.
//!
//! # Invariants
//! - Transaction counts are read only when no backend of the database is
//!   connected, so every backend has published its counts.
//! - A path is measured only when every action of its backlog reached the
//!   state it measures; otherwise the run fails with a time-out.

mod report;

pub use report::*;

use crate::harness::bench_worker;
use crate::harness::drain::{drain, Progress};
use crate::harness::server::{with_cluster, Statements};
use crate::memory;
use crate::pgbench::{self, PgbenchResult, PgbenchRun};
use crate::views::BenchViews;
use crate::views::{
    database_backends, database_synchronous_commit_set, database_xact_counts, statements_enable,
    statements_reset, statements_top, StatementStat, PGBENCH_JOB_CLAIM_SCRIPT,
};
use crate::{bar, run_dir, BenchError};
use courier_core::Limits;
use courier_dispatch::server::{router, ServerConfig};
use courier_dispatch::worker::{Provider, WorkerConfig};
use courier_fake::{FakeConfig, FaultRates, Latency, MsRange};
use courier_inproc::{StubProvider, WorkerPool};
use courier_provider::{ClientConfig, ProviderClient};
use courier_store::cluster::Cluster;
use courier_store::{ClaimMode, PgStore, StoreConfig};
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Claim-to-settle actions per second the protocol should reach with
/// synchronous commit on.
pub const CLAIM_TO_SETTLE_TARGET_PER_S: f64 = 10_000.0;
/// End-to-end actions per second the protocol should reach.
pub const END_TO_END_TARGET_PER_S: f64 = 2_000.0;
/// A worker's resident memory should stay below this.
pub const WORKER_RSS_TARGET_KIB: u64 = 50 * 1024;

const API_KEY: &str = "bench-api-key";
const SECRET: &str = "bench-webhook-secret";
const STATEMENTS_SHOWN: i64 = 8;

/// Everything a throughput run needs; checked by [`ThroughputConfig::validate`].
#[derive(Debug, Clone)]
pub struct ThroughputConfig {
    /// The backlog of each path.
    pub actions: u32,
    pub stores: u32,
    pub workers: u32,
    /// Actions each worker works on at once.
    pub concurrency: u32,
    pub claim_batch_max: u32,
    pub store_in_flight_max: u32,
    /// Connections of each worker's pool.
    pub pool_size_max: usize,
    pub claim: ClaimMode,
    pub pgbench_clients: u32,
    pub pgbench_seconds: u64,
    /// Which `synchronous_commit` settings to measure, in order.
    pub synchronous_commit: Vec<bool>,
    pub seed: u64,
    /// How long one path may take.
    pub timeout_s: u64,
    pub progress: bool,
}

impl ThroughputConfig {
    pub fn new(seed: u64) -> Self {
        ThroughputConfig {
            actions: 100_000,
            stores: 100,
            // One worker with deep batches: on two cores, more workers
            // mostly find each other's store rows locked (see the README).
            workers: 1,
            concurrency: 512,
            claim_batch_max: 256,
            store_in_flight_max: 16,
            pool_size_max: 4,
            claim: ClaimMode::Fair,
            pgbench_clients: 8,
            pgbench_seconds: 10,
            synchronous_commit: vec![true, false],
            seed,
            timeout_s: 600,
            progress: true,
        }
    }

    /// Seconds, a tiny load: checks that everything runs, judges nothing.
    pub fn smoke(seed: u64) -> Self {
        ThroughputConfig {
            actions: 300,
            stores: 10,
            workers: 2,
            concurrency: 8,
            claim_batch_max: 4,
            store_in_flight_max: 4,
            pgbench_clients: 2,
            pgbench_seconds: 1,
            timeout_s: 120,
            ..ThroughputConfig::new(seed)
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=1_000_000).contains(&self.actions) {
            return Err("--actions must be within 1..=1000000".into());
        }
        if !(1..=10_000).contains(&self.stores) {
            return Err("--stores must be within 1..=10000".into());
        }
        if !(1..=64).contains(&self.workers) {
            return Err("--workers must be within 1..=64".into());
        }
        if !(1..=1024).contains(&self.concurrency) {
            return Err("--concurrency must be within 1..=1024".into());
        }
        if !(1..=1000).contains(&self.claim_batch_max) {
            return Err("--claim-batch-max must be within 1..=1000".into());
        }
        if !(1..=10_000).contains(&self.store_in_flight_max) {
            return Err("--store-in-flight-max must be within 1..=10000".into());
        }
        if !(1..=64).contains(&self.pool_size_max) {
            return Err("--pool-size must be within 1..=64".into());
        }
        if self.workers as usize * self.pool_size_max > 256 {
            return Err("--workers times --pool-size must be at most 256 connections".into());
        }
        if !(1..=256).contains(&self.pgbench_clients) {
            return Err("--pgbench-clients must be within 1..=256".into());
        }
        if !(1..=600).contains(&self.pgbench_seconds) {
            return Err("--pgbench-seconds must be within 1..=600".into());
        }
        if self.synchronous_commit.is_empty() || self.synchronous_commit.len() > 2 {
            return Err("measure synchronous commit on, off, or both".into());
        }
        if !(1..=3600).contains(&self.timeout_s) {
            return Err("--timeout-s must be within 1..=3600".into());
        }
        Ok(())
    }

    fn limits(&self) -> Result<Limits, String> {
        let l = Limits {
            worker_concurrency_max: self.concurrency,
            claim_batch_max: self.claim_batch_max,
            store_in_flight_max: self.store_in_flight_max,
            ..Limits::default()
        };
        l.validate().map_err(|e| e.to_string())?;
        Ok(l)
    }

    /// Jobs for pgbench: enough for 40,000 transactions a second.
    fn pgbench_jobs(&self) -> u32 {
        (self.pgbench_seconds as u32)
            .saturating_mul(40_000)
            .max(10_000)
    }
}

/// Runs the ceiling and both paths for each `synchronous_commit` setting.
pub async fn run(cfg: &ThroughputConfig) -> Result<ThroughputReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let limits = cfg.limits().map_err(BenchError::Settings)?;
    let started = Instant::now();
    let dir = run_dir("courier-bench-throughput-")?;
    let cluster = Cluster::new(dir.path().join("pg"));
    let track = Statements::All { planning: false };
    let (results, statements) = with_cluster(cluster, track, async |server| {
        let server_url = server.url.clone();
        let port = server.port().await?;
        let statements = server.statements_loaded && statements_enable(&server_url).await?;
        let ctx = Ctx {
            cfg,
            limits,
            server_url: server_url.clone(),
            port,
            dir: dir.path(),
            statements,
        };
        let results = all_paths(&ctx).await?;
        Ok::<_, BenchError>((results, statements))
    })
    .await?;

    let peak_rss_kib_run = results
        .iter()
        .flat_map(|r| [r.claim_to_settle.peak_rss_kib, r.end_to_end.peak_rss_kib])
        .flatten()
        .max();
    let targets = targets(&results);
    Ok(ThroughputReport {
        seed: cfg.seed,
        settings: ThroughputSettings {
            actions: cfg.actions,
            stores: cfg.stores,
            workers: cfg.workers,
            concurrency: cfg.concurrency,
            claim_batch_max: cfg.claim_batch_max,
            store_in_flight_max: cfg.store_in_flight_max,
            pool_size_max: cfg.pool_size_max,
            claim: cfg.claim,
            pgbench_clients: cfg.pgbench_clients,
            pgbench_seconds: cfg.pgbench_seconds,
            statement_statistics: statements,
        },
        results,
        targets,
        peak_rss_kib_run,
        wall_time_s: started.elapsed().as_secs_f64(),
    })
}

/// The paths for each `synchronous_commit` setting. The ceilings and the
/// claim-to-settle paths first, the end-to-end paths last: the process's
/// peak memory can only be reset to what it holds, and the allocator keeps
/// what the larger end-to-end path took, which would otherwise count as the
/// workers'.
async fn all_paths(ctx: &Ctx<'_>) -> Result<Vec<SyncResult>, BenchError> {
    let mut first = Vec::new();
    for &sync in &ctx.cfg.synchronous_commit {
        let (pgbench, exhausted) = ceiling(ctx, sync).await?;
        let c2s = claim_to_settle(ctx, sync).await?;
        first.push((sync, pgbench, exhausted, c2s));
    }
    let mut results = Vec::new();
    for (sync, pgbench, pgbench_exhausted, claim_to_settle) in first {
        let end_to_end = end_to_end(ctx, sync).await?;
        results.push(SyncResult {
            synchronous_commit: sync,
            claim_to_settle_vs_pgbench: crate::stats::ratio(
                claim_to_settle.actions_per_s,
                pgbench.tps,
            ),
            end_to_end_vs_pgbench: crate::stats::ratio(end_to_end.actions_per_s, pgbench.tps),
            pgbench,
            pgbench_exhausted,
            claim_to_settle,
            end_to_end,
        });
    }
    Ok(results)
}

struct Ctx<'a> {
    cfg: &'a ThroughputConfig,
    limits: Limits,
    server_url: String,
    port: u16,
    dir: &'a Path,
    statements: bool,
}

fn sync_name(sync: bool) -> &'static str {
    if sync {
        "on"
    } else {
        "off"
    }
}

/// A fresh database with the given synchronous commit setting; its URL.
async fn fresh_database(ctx: &Ctx<'_>, name: &str, sync: bool) -> Result<String, BenchError> {
    let url = courier_store::database_recreate(&ctx.server_url, name).await?;
    database_synchronous_commit_set(&ctx.server_url, name, sync).await?;
    Ok(url)
}

fn store_config(url: &str, pool: usize, migrate: bool) -> StoreConfig {
    let mut sc = StoreConfig::new(url);
    sc.pool_size_max = pool;
    sc.migrate = migrate;
    sc
}

/// Waits until no backend is connected to the database (bounded): each
/// backend publishes its statistics when it exits.
pub(crate) async fn backends_gone(server_url: &str, name: &str) -> Result<(), BenchError> {
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    loop {
        let n = database_backends(server_url, name).await?;
        if n == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("the connections to {name} to close"),
                limit,
                detail: format!("{n} still connected"),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// pgbench's claim-and-complete ceiling; true when it ran out of jobs.
async fn ceiling(ctx: &Ctx<'_>, sync: bool) -> Result<(PgbenchResult, bool), BenchError> {
    let name = "courier_bench_pgbench";
    let url = fresh_database(ctx, name, sync).await?;
    let jobs = ctx.cfg.pgbench_jobs();
    {
        let store = PgStore::connect(&store_config(&url, 1, false)).await?;
        store.pgbench_jobs_create(jobs).await?;
    }
    let b = bar(
        ctx.cfg.progress,
        ctx.cfg.pgbench_seconds,
        "{prefix} [{bar:30}] {msg}",
    );
    b.set_prefix(format!("pgbench, synchronous_commit {}", sync_name(sync)));
    b.set_message(format!(
        "{} clients for {} s",
        ctx.cfg.pgbench_clients, ctx.cfg.pgbench_seconds
    ));
    b.enable_steady_tick(Duration::from_millis(250));
    let result = pgbench::run(PgbenchRun {
        port: ctx.port,
        database: name,
        script: PGBENCH_JOB_CLAIM_SCRIPT,
        clients: ctx.cfg.pgbench_clients,
        threads: 2,
        seconds: ctx.cfg.pgbench_seconds,
        dir: ctx.dir,
    })
    .await;
    b.finish_with_message(match &result {
        Ok(r) => format!("{:.0} transactions/s", r.tps),
        Err(_) => "failed".to_string(),
    });
    let result = result?;
    let store = PgStore::connect(&store_config(&url, 1, false)).await?;
    let done = store.pgbench_jobs_done().await?;
    Ok((result, done >= i64::from(jobs)))
}

/// Starts `workers` in-process workers on `url` with `provider`; the first
/// also reconciles when `reconcile_one` asks.
async fn start_workers<P: Provider + Clone + Send + Sync + 'static>(
    ctx: &Ctx<'_>,
    url: &str,
    provider: P,
    reconcile_one: bool,
) -> Result<WorkerPool<P>, BenchError> {
    let worker = WorkerConfig {
        reconcile: reconcile_one,
        ..bench_worker(
            ctx.limits.clone(),
            ctx.cfg.claim,
            courier_dispatch::owner_name(),
            20,
            ctx.cfg.seed,
        )
    };
    let store = store_config(url, ctx.cfg.pool_size_max, false);
    Ok(WorkerPool::start(ctx.cfg.workers, &store, |_| provider.clone(), &worker).await?)
}

/// Counters and statement statistics around one path.
struct Meter {
    name: &'static str,
    before: (i64, i64),
}

impl Meter {
    async fn start(ctx: &Ctx<'_>, name: &'static str) -> Result<Meter, BenchError> {
        backends_gone(&ctx.server_url, name).await?;
        let before = database_xact_counts(&ctx.server_url, name).await?;
        if ctx.statements {
            statements_reset(&ctx.server_url).await?;
        }
        memory::peak_reset();
        Ok(Meter { name, before })
    }

    /// Call after every pool of the database was dropped. `own_reads` is the
    /// number of single-statement transactions the benchmark itself ran.
    async fn finish(
        self,
        ctx: &Ctx<'_>,
        actions: u64,
        elapsed: Duration,
        own_reads: i64,
        peak_rss_kib: Option<u64>,
    ) -> Result<PathResult, BenchError> {
        backends_gone(&ctx.server_url, self.name).await?;
        let after = database_xact_counts(&ctx.server_url, self.name).await?;
        let transactions = (after.0 - self.before.0 - own_reads).max(0);
        let statements = if ctx.statements {
            statements_top(&ctx.server_url, self.name, 1000).await?
        } else {
            Vec::new()
        };
        let db_exec_us_per_action = (!statements.is_empty()).then(|| {
            statements.iter().map(|s| s.total_exec_ms).sum::<f64>() * 1000.0 / actions.max(1) as f64
        });
        let elapsed_s = elapsed.as_secs_f64().max(1e-9);
        Ok(PathResult {
            actions,
            elapsed_s,
            actions_per_s: actions as f64 / elapsed_s,
            transactions,
            rollbacks: after.1 - self.before.1,
            transactions_per_action: transactions as f64 / actions.max(1) as f64,
            statements: statements
                .into_iter()
                .take(STATEMENTS_SHOWN as usize)
                .collect(),
            db_exec_us_per_action,
            peak_rss_kib,
        })
    }
}

fn store_names(n: u32) -> Vec<String> {
    (0..n).map(|i| format!("store-{i:03}")).collect()
}

/// Enqueues the backlog on a fresh database and closes the connection.
async fn backlog(ctx: &Ctx<'_>, name: &str, sync: bool) -> Result<String, BenchError> {
    let url = fresh_database(ctx, name, sync).await?;
    let store = PgStore::connect(&store_config(&url, 1, true)).await?;
    store
        .actions_enqueue_bulk(&store_names(ctx.cfg.stores), ctx.cfg.actions)
        .await?;
    store.tables_analyze().await?;
    Ok(url)
}

/// Waits until `reached()` counts the whole backlog; returns when.
async fn until_all(
    ctx: &Ctx<'_>,
    what: &str,
    bar: &indicatif::ProgressBar,
    mut reached: impl AsyncFnMut() -> Result<u64, BenchError>,
) -> Result<Instant, BenchError> {
    let total = u64::from(ctx.cfg.actions);
    let limit = Duration::from_secs(ctx.cfg.timeout_s);
    drain(what, limit, Duration::from_millis(20), async || {
        let done = reached().await?;
        bar.set_position(done.min(total));
        Ok(Progress { done, total })
    })
    .await
}

async fn claim_to_settle(ctx: &Ctx<'_>, sync: bool) -> Result<PathResult, BenchError> {
    let name = "courier_bench_c2s";
    let url = backlog(ctx, name, sync).await?;
    let meter = Meter::start(ctx, name).await?;
    let b = bar(
        ctx.cfg.progress,
        u64::from(ctx.cfg.actions),
        "{prefix} [{bar:30}] {pos}/{len} settled",
    );
    b.set_prefix(format!(
        "claim to settle, synchronous_commit {}",
        sync_name(sync)
    ));
    let stub = StubProvider::new();
    let started = Instant::now();
    let mut pool = start_workers(ctx, &url, stub.clone(), false).await?;
    let finished = until_all(ctx, "claim to settle", &b, async || Ok(pool.settled())).await;
    pool.stop().await?;
    let peak = memory::peak_kib();
    b.finish();
    let finished = finished?;
    let actions = pool.settled();
    drop(pool);
    let result = meter
        .finish(ctx, actions, finished - started, 0, peak)
        .await?;
    // The stub saw one message per action, and the database agrees.
    let store = PgStore::connect(&store_config(&url, 1, false)).await?;
    let p = store.actions_progress().await?;
    if p.settled != i64::from(ctx.cfg.actions) || stub.messages() != ctx.cfg.actions as usize {
        return Err(BenchError::Task(format!(
            "claim to settle: {} actions settled in the database and {} messages at the stub, expected {}",
            p.settled,
            stub.messages(),
            ctx.cfg.actions
        )));
    }
    Ok(result)
}

/// The webhook API in-process on a loopback port until `shutdown`: its URL
/// and its task.
async fn webhook_api(
    ctx: &Ctx<'_>,
    url: &str,
    shutdown: &CancellationToken,
) -> Result<(String, tokio::task::JoinHandle<std::io::Result<()>>), BenchError> {
    let api_store = PgStore::connect(&store_config(url, 16, false)).await?;
    let app = router(
        api_store,
        ServerConfig {
            limits: ctx.limits.clone(),
            webhook_secret: SECRET.as_bytes().to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: None,
            request_timeout: Duration::from_secs(30),
            provider_webhooks: Default::default(),
        },
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let api = format!("http://{}", listener.local_addr()?);
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });

    Ok((api, server))
}

/// The fake provider: no faults, no latency, statuses within milliseconds.
async fn fake_provider(ctx: &Ctx<'_>, sync: bool) -> Result<courier_fake::FakeHandle, BenchError> {
    let mut fake = FakeConfig::new(
        ctx.dir.join(format!("provider-{}.jsonl", sync_name(sync))),
        API_KEY,
        SECRET,
    );
    fake.faults = FaultRates::NONE;
    fake.latency = Latency::ZERO;
    fake.seed = ctx.cfg.seed;
    fake.sent_after_ms = MsRange::new(1, 5);
    fake.delivered_after_ms = MsRange::new(1, 5);
    fake.webhook_concurrency_max = 256;
    Ok(courier_fake::start(fake).await?)
}

async fn end_to_end(ctx: &Ctx<'_>, sync: bool) -> Result<PathResult, BenchError> {
    let name = "courier_bench_e2e";
    let url = backlog(ctx, name, sync).await?;
    let meter = Meter::start(ctx, name).await?;
    let b = bar(
        ctx.cfg.progress,
        u64::from(ctx.cfg.actions),
        "{prefix} [{bar:30}] {pos}/{len} done",
    );
    b.set_prefix(format!(
        "end to end, synchronous_commit {}",
        sync_name(sync)
    ));

    // The webhook API, in-process.
    let shutdown = CancellationToken::new();
    let (api, server) = webhook_api(ctx, &url, &shutdown).await?;

    let provider = fake_provider(ctx, sync).await?;
    let client = ProviderClient::new(ClientConfig {
        base_url: provider.url(),
        api_key: API_KEY.into(),
        status_callback: Some(format!("{api}/v1/webhooks/provider")),
        timeout: Duration::from_millis(ctx.limits.request_timeout_ms),
    })
    .map_err(|e| BenchError::Settings(e.to_string()))?;

    let started = Instant::now();
    let mut pool = start_workers(ctx, &url, client, true).await?;
    let probe = PgStore::connect(&store_config(&url, 1, false)).await?;
    let total = u64::from(ctx.cfg.actions);
    let mut reads = 0i64;
    let mut last_read: Option<Instant> = None;
    let finished = until_all(ctx, "end to end", &b, async || {
        // Until every action is settled the workers' own counters tell
        // progress; after that the database (done needs the webhooks),
        // read at most ten times a second so the reads cost little.
        let settled = pool.settled();
        if settled < total || last_read.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) {
            return Ok(settled.min(total.saturating_sub(1)));
        }
        last_read = Some(Instant::now());
        reads += 1;
        Ok(probe.actions_progress().await?.done.max(0) as u64)
    })
    .await;
    pool.stop().await?;
    let peak = memory::peak_kib();
    b.finish();
    provider.shutdown().await?;
    shutdown.cancel();
    server
        .await?
        .map_err(|e| BenchError::Task(format!("webhook server: {e}")))?;
    let finished = finished?;
    drop(pool);
    drop(probe);
    meter
        .finish(
            ctx,
            u64::from(ctx.cfg.actions),
            finished - started,
            reads,
            peak,
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_smoke_settings_are_valid() {
        assert_eq!(ThroughputConfig::new(1).validate(), Ok(()));
        assert_eq!(ThroughputConfig::smoke(1).validate(), Ok(()));
        assert!(ThroughputConfig::new(1).limits().is_ok());
    }

    #[test]
    fn bad_settings_name_their_flag() {
        let base = ThroughputConfig::new(1);
        let cases = [
            (
                ThroughputConfig {
                    actions: 0,
                    ..base.clone()
                },
                "--actions",
            ),
            (
                ThroughputConfig {
                    workers: 65,
                    ..base.clone()
                },
                "--workers",
            ),
            (
                ThroughputConfig {
                    workers: 64,
                    pool_size_max: 8,
                    ..base.clone()
                },
                "--pool-size",
            ),
            (
                ThroughputConfig {
                    pgbench_seconds: 0,
                    ..base.clone()
                },
                "--pgbench-seconds",
            ),
        ];
        for (cfg, flag) in cases {
            let err = cfg.validate().expect_err(flag);
            assert!(err.contains(flag), "{err:?} does not name {flag}");
        }
    }
}
