//! courier-adapter: courier in the public PostgreSQL queue benchmark
//! (`hardbyte/postgresql-job-queue-benchmarking`), as one long-running
//! process that speaks its long-horizon protocol (`CONTRIBUTING_ADAPTERS.md`
//! there): settings from the environment, one `descriptor` record, then
//! every `SAMPLE_EVERY_S` (on wall-clock boundaries) one sample each of the
//! claim and end-to-end latencies' p50/p95/p99 over a rolling 30 s, the
//! enqueue and completion rates, and the queue depth, as JSONL on stdout
//! ([`Sampler`]); logs on stderr.
//!
//! courier runs as itself: the [`producer`] enqueues through courier's set
//! form (`courier_store::actions_enqueue_many`), one statement per batch;
//! the consumers are one `courier_dispatch::worker::Worker`, the one `courier
//! worker` runs, with its defaults except the settings
//! [`config::Config::differs_from_courier_worker`] names (the descriptor
//! names them too), whose provider is the throughput benchmark's in-process
//! stub (`courier_inproc::StubProvider`, started in a
//! `courier_inproc::WorkerPool` of one) answering `JOB_WORK_MS` after each send,
//! its messages kept in a record file that outlives the process ([`job`]).
//! Claims, intents, counted attempts, leases, heartbeats, lookups after a
//! reclaim, fenced settles and the pruner are production's: every loop of
//! the worker is `Worker::run`'s, which the adapter only configures. Its
//! own tasks are the benchmark's: the producer, the depth count and the
//! samples.
//!
//! A job completes when its settle commits (the action is `dispatched`:
//! the provider has accepted the message). Final statuses (the provider's
//! webhooks) are not part of the benchmark and the reconciler does not run.
//!
//! # Invariants
//! - Every job the adapter enqueued completes once, across SIGKILLs and
//!   restarts of the adapter: a reclaimed job whose message exists is found
//!   by its lookup and settled, never sent again ([`judge`] checks it).
//! - The offered rate follows real elapsed time ([`pacing`]).
//! - Over a process's samples, `rate x window_s` adds up to what it counted
//!   ([`Sampler`]).
//! - SIGTERM ends the run within [`SHUTDOWN_LIMIT`].

pub mod config;
pub mod emit;
pub mod job;
pub mod judge;
pub mod pacing;
pub mod producer;
pub mod window;

use config::Config;
use courier_core::Retention;
use courier_dispatch::pruner::PrunerConfig;
use courier_dispatch::worker::{Worker, WorkerConfig};
use courier_inproc::{StubProvider, StubRecord, WorkerPool};
use courier_store::{ClaimMode, PgStore, StoreConfig, StoreError};
use producer::{Depth, Producer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long the adapter may take, after SIGTERM, to stop producing and to
/// finish the jobs in hand (the contract allows 5 s in all; a job not
/// finished by then is reclaimed when its lease runs out).
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(3);
/// How long the adapter waits for PostgreSQL at start.
const CONNECT_LIMIT: Duration = Duration::from_secs(60);
/// How often the depth is counted.
const DEPTH_POLL: Duration = Duration::from_millis(200);
/// The worker's connections: as many as `courier worker` opens.
const WORKER_POOL_SIZE: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("the stub's record {path}: {error}")]
    Record { path: String, error: std::io::Error },
}

/// Applies courier's migrations. Today `PgStore::connect` does it (with
/// `migrate: true`); should courier move migrations to their own command,
/// this is the one call to change.
async fn prepare_schema(url: &str) -> Result<PgStore, StoreError> {
    connect(url, 2, true).await
}

/// Connects, retrying while PostgreSQL is not there yet (bounded).
async fn connect(url: &str, pool: usize, migrate: bool) -> Result<PgStore, StoreError> {
    let deadline = Instant::now() + CONNECT_LIMIT;
    loop {
        let mut sc = StoreConfig::new(url);
        sc.pool_size_max = pool;
        sc.migrate = migrate;
        match PgStore::connect(&sc).await {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "PostgreSQL not reachable yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The worker's settings: `courier worker`'s, with the differences
/// [`Config::limits`] and [`Config::differs_from_courier_worker`] name, and
/// production's pruner (`courier worker`'s default retention), which
/// `Worker::run` runs beside the claims: a long-horizon run keeps its
/// maintained counts folded and its history within retention as a
/// deployment does.
fn worker_config(cfg: &Config) -> WorkerConfig {
    let limits = cfg.limits();
    WorkerConfig {
        pruner: Some(PrunerConfig::new(&Retention::default(), &limits)),
        limits,
        claim_mode: ClaimMode::Fair,
        owner: courier_dispatch::owner_name(),
        idle_poll_ms: cfg.idle_poll_ms,
        reconcile: false,
        seed: u64::from(std::process::id()),
        // The stub answers as the contract says.
        tier: courier_core::Tier::A,
        provider_gate: None,
    }
}

/// Opens the stub's record: emptied when the database has no action yet (a
/// new run), kept otherwise (a restart). Only instance 0 may empty it, and
/// it does so before its descriptor: the harness starts the next replica
/// only once it has read that descriptor, so no replica has the record open
/// when it is emptied.
async fn open_record(cfg: &Config, store: &PgStore) -> Result<StubRecord, AdapterError> {
    let fresh = cfg.instance_id == 0 && store.actions_progress().await?.total == 0;
    StubRecord::open(&cfg.stub_record, fresh).map_err(|error| AdapterError::Record {
        path: cfg.stub_record.display().to_string(),
        error,
    })
}

/// Runs the long-horizon scenario until `shutdown` is cancelled.
pub async fn run(cfg: Config, shutdown: CancellationToken) -> Result<(), AdapterError> {
    let cfg = Arc::new(cfg);
    for (knob, why) in &cfg.not_honoured {
        tracing::warn!(knob, "not honoured: {why}");
    }
    let schema = prepare_schema(&cfg.database_url).await?;
    let record = open_record(&cfg, &schema).await?;
    let version = courier_store::migrate::MIGRATIONS.last().map_or(0, |m| m.0);
    emit::emit(&emit::descriptor(
        &cfg.db_name,
        cfg.instance_id,
        version,
        &cfg.differs_from_courier_worker(),
        &cfg.not_honoured,
    ));
    let measures = Arc::new(job::Measures::new(cfg.latency_window_s));
    let provider = job::Measured::new(
        StubProvider::with_record(record, Duration::from_millis(cfg.job_work_ms)),
        cfg.fail,
        measures.clone(),
    );
    let enqueued = Arc::new(AtomicU64::new(0));
    let depth = Arc::new(Depth::default());
    let producer = Producer::new(
        connect(&cfg.database_url, 2, false).await?,
        cfg.clone(),
        enqueued.clone(),
        depth.clone(),
    );
    // The pool's one worker connects once PostgreSQL answers (the
    // schema's connection above waited for it).
    let mut worker_store = StoreConfig::new(&cfg.database_url);
    worker_store.pool_size_max = WORKER_POOL_SIZE;
    worker_store.migrate = false;
    let mut pool =
        WorkerPool::start(1, &worker_store, |_| provider.clone(), &worker_config(&cfg)).await?;
    let worker = pool.workers()[0].clone();
    // Every count starts from here: the first sample covers the time since.
    let sampler = Sampler {
        cfg: cfg.clone(),
        started: Instant::now(),
        enqueued: enqueued.clone(),
        depth: depth.clone(),
        measures,
        worker: worker.clone(),
    };
    let stop = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(sampler.run(stop.clone()));
    tasks.spawn({
        let stop = stop.clone();
        async move { producer.run(stop).await }
    });
    tasks.spawn(poll_depth(schema, enqueued, depth, stop.clone()));
    shutdown.cancelled().await;
    tracing::info!("shutting down");
    stop.cancel();
    let drained = tokio::time::timeout(SHUTDOWN_LIMIT, async {
        while tasks.join_next().await.is_some() {}
        let _ = pool.stop().await;
    });
    if drained.await.is_err() {
        tracing::warn!(
            "jobs still in hand at exit; their leases will run out and they will be reclaimed"
        );
    }
    Ok(())
}

/// Counts the pending actions every [`DEPTH_POLL`]; a failed count makes
/// the depth unknown until the next one succeeds.
async fn poll_depth(
    store: PgStore,
    enqueued: Arc<AtomicU64>,
    depth: Arc<Depth>,
    stop: CancellationToken,
) {
    let mut failures = 0u64;
    while !stop.is_cancelled() {
        let before = enqueued.load(Ordering::Relaxed);
        match store.actions_pending_count().await {
            Ok(n) => depth.set(u64::try_from(n).unwrap_or(0), before),
            Err(e) => {
                depth.unknown();
                if failures.is_multiple_of(50) {
                    tracing::warn!(error = %e, "depth count failed; no depth is reported until one succeeds");
                }
                failures += 1;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(DEPTH_POLL) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Emits the samples on wall-clock boundaries.
///
/// # Invariants
/// - Each sample's rates are counts over its own window, and `window_s` is
///   that window's real length: from the previous sample, or for the first
///   one from when the counts started (after the process started), so
///   `rate x window_s` is the count and no window is longer than the
///   process has lived. The percentiles' `window_s` is the rolling window,
///   shortened likewise to the time since the counts started.
/// - A metric that cannot be read is left out of the tick, never repeated:
///   the depth when the latest count failed (PostgreSQL down), the claim and
///   end-to-end percentiles when no job started (or ended) since the
///   previous tick, so a stalled run does not keep showing the latencies
///   of before the stall.
pub struct Sampler {
    cfg: Arc<Config>,
    started: Instant,
    enqueued: Arc<AtomicU64>,
    depth: Arc<Depth>,
    measures: Arc<job::Measures>,
    worker: Arc<Worker<job::Measured>>,
}

/// The counts at one moment.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    enqueued: u64,
    completed: u64,
    failures: u64,
    jobs_started: u64,
    jobs_finished: u64,
}

impl Sampler {
    fn read(&self) -> Reading {
        let m = &self.measures;
        Reading {
            at: Instant::now(),
            enqueued: self.enqueued.load(Ordering::Relaxed),
            // A job completes when its settle commits; a refused (failed)
            // one does not complete.
            completed: self.worker.stats().settled.load(Ordering::Relaxed),
            failures: m.failures.load(Ordering::Relaxed),
            jobs_started: m.started.load(Ordering::Relaxed),
            jobs_finished: m.finished.load(Ordering::Relaxed),
        }
    }

    async fn run(self, stop: CancellationToken) {
        let period = Duration::from_secs(self.cfg.sample_every_s);
        let mut last = Reading {
            at: self.started,
            enqueued: 0,
            completed: 0,
            failures: 0,
            jobs_started: 0,
            jobs_finished: 0,
        };
        loop {
            let (wait, at) = pacing::next_boundary(emit::now_since_epoch(), period);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return,
            }
            let now = self.read();
            self.emit_tick(at, &last, &now);
            last = now;
        }
    }

    /// One record per metric that can be read, all stamped with the boundary `at`.
    fn emit_tick(&self, at: Duration, last: &Reading, now: &Reading) {
        let t = emit::iso(at);
        let window_s = (now.at - last.at).as_secs_f64().max(1e-3);
        let lived_s = (now.at - self.started).as_secs_f64();
        let latency_window_s = (self.cfg.latency_window_s as f64).min(lived_s);
        let rate = |before: u64, after: u64| after.saturating_sub(before) as f64 / window_s;
        let second = at.as_secs().saturating_sub(1);
        let mut records: Vec<(&str, f64, f64)> = vec![
            ("enqueue_rate", rate(last.enqueued, now.enqueued), window_s),
            (
                "completion_rate",
                rate(last.completed, now.completed),
                window_s,
            ),
        ];
        if self.cfg.fail.active() {
            records.push((
                "retryable_failure_rate",
                rate(last.failures, now.failures),
                window_s,
            ));
        }
        for (window, fed, names) in [
            (
                &self.measures.claims,
                now.jobs_started > last.jobs_started,
                ["claim_p50_ms", "claim_p95_ms", "claim_p99_ms"],
            ),
            (
                &self.measures.end_to_end,
                now.jobs_finished > last.jobs_finished,
                [
                    "end_to_end_p50_ms",
                    "end_to_end_p95_ms",
                    "end_to_end_p99_ms",
                ],
            ),
        ] {
            let p = fed
                .then(|| {
                    let mut w = window.lock().unwrap_or_else(|p| p.into_inner());
                    w.percentiles(second)
                })
                .flatten();
            if let Some(p) = p {
                for (name, v) in names.into_iter().zip([p.p50_ms, p.p95_ms, p.p99_ms]) {
                    records.push((name, v, latency_window_s));
                }
            }
        }
        if let Some(depth) = self.depth.current() {
            records.push(("queue_depth", depth as f64, 0.0));
        }
        for (metric, value, window_s) in records {
            emit::emit(&emit::sample(
                &t,
                self.cfg.instance_id,
                metric,
                value,
                window_s,
            ));
        }
    }
}
