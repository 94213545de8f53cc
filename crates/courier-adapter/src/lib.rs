//! courier-adapter: courier in the public PostgreSQL queue benchmark
//! (`hardbyte/postgresql-job-queue-benchmarking`), as one long-running
//! process that speaks its long-horizon protocol (`CONTRIBUTING_ADAPTERS.md`
//! there): settings from the environment, one `descriptor` record, then
//! every `SAMPLE_EVERY_S` (on wall-clock boundaries) one sample each of the
//! claim latency's p50/p95/p99 over a rolling 30 s, the enqueue and
//! completion rates, and the queue depth, as JSONL on stdout; logs on stderr.
//!
//! courier runs as itself: the [`producer`] enqueues through
//! `courier_store::action_enqueue` in batched transactions; the consumers
//! are one `courier_dispatch::worker::Worker` with `WORKER_COUNT`
//! deliveries at once, whose provider is the throughput benchmark's
//! in-process stub (`courier_bench::stub`) answering `JOB_WORK_MS` after
//! each send, its messages kept in a record file that outlives the process
//! ([`job`]). Claims, intents, counted attempts, leases, heartbeats,
//! lookups after a reclaim, fenced settles and the pruner are production's:
//! every loop of the worker is `Worker::run`'s, which the adapter only
//! configures. Its own tasks are the benchmark's: the producer, the depth
//! count and the samples.
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
//! - SIGTERM ends the run within [`SHUTDOWN_LIMIT`].

pub mod config;
pub mod emit;
pub mod job;
pub mod judge;
pub mod pacing;
pub mod producer;
pub mod window;

use config::Config;
use courier_bench::stub::{StubProvider, StubRecord};
use courier_core::{Limits, Retention};
use courier_dispatch::pruner::PrunerConfig;
use courier_dispatch::worker::{Worker, WorkerConfig};
use courier_store::{ClaimMode, PgStore, StoreConfig, StoreError};
use producer::{Depth, Producer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use window::Window;

/// How long the adapter may take, after SIGTERM, to stop producing and to
/// finish the jobs in hand (the contract allows 5 s in all; a job not
/// finished by then is reclaimed when its lease runs out).
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(3);
/// How long the adapter waits for PostgreSQL at start.
const CONNECT_LIMIT: Duration = Duration::from_secs(60);
/// How often the depth is counted.
const DEPTH_POLL: Duration = Duration::from_millis(200);

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

/// The worker's settings: production's limits, with every delivery of the
/// benchmark's single store allowed in flight at once, and production's
/// pruner (`courier worker`'s default retention), which `Worker::run` runs
/// beside the claims: a long-horizon run keeps its maintained counts folded
/// and its history within retention as a deployment does.
fn worker_config(cfg: &Config) -> WorkerConfig {
    let limits = Limits {
        worker_concurrency_max: cfg.worker_count,
        store_in_flight_max: cfg.worker_count,
        ..Limits::default()
    };
    WorkerConfig {
        pruner: Some(PrunerConfig::new(&Retention::default(), &limits)),
        limits,
        claim_mode: ClaimMode::Fair,
        owner: courier_dispatch::owner_name(),
        idle_poll_ms: cfg.idle_poll_ms,
        reconcile: false,
        seed: u64::from(std::process::id()),
    }
}

/// Opens the stub's record: emptied when the database has no action yet (a
/// new run), kept otherwise (a restart). Only instance 0 may empty it: the
/// harness starts the other replicas after it.
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
    let schema = prepare_schema(&cfg.database_url).await?;
    let version = courier_store::migrate::MIGRATIONS.last().map_or(0, |m| m.0);
    emit::emit(&emit::descriptor(&cfg.db_name, cfg.instance_id, version));
    let record = open_record(&cfg, &schema).await?;
    let claims = Arc::new(Mutex::new(Window::new(cfg.latency_window_s)));
    let provider = job::Measured {
        stub: StubProvider::with_record(record, Duration::from_millis(cfg.job_work_ms)),
        claims: claims.clone(),
    };
    let pool = (cfg.worker_count as usize / 4).clamp(4, 16);
    let worker = Arc::new(Worker::new(
        connect(&cfg.database_url, pool, false).await?,
        provider,
        worker_config(&cfg),
    ));
    let enqueued = Arc::new(AtomicU64::new(0));
    let depth = Arc::new(Depth::default());
    let producer = Producer::new(
        connect(&cfg.database_url, 2, false).await?,
        cfg.clone(),
        enqueued.clone(),
        depth.clone(),
    );
    let stop = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn({
        let stop = stop.clone();
        async move { producer.run(stop).await }
    });
    tasks.spawn(poll_depth(
        schema,
        enqueued.clone(),
        depth.clone(),
        stop.clone(),
    ));
    let sampler = Sampler {
        cfg: cfg.clone(),
        enqueued,
        depth,
        claims,
        worker: worker.clone(),
    };
    tasks.spawn(sampler.run(stop.clone()));
    let work = tokio::spawn({
        let (worker, stop) = (worker.clone(), stop.clone());
        async move { worker.run(stop).await }
    });
    shutdown.cancelled().await;
    tracing::info!("shutting down");
    stop.cancel();
    let drained = tokio::time::timeout(SHUTDOWN_LIMIT, async {
        while tasks.join_next().await.is_some() {}
        let _ = work.await;
    });
    if drained.await.is_err() {
        tracing::warn!(
            "jobs still in hand at exit; their leases will run out and they will be reclaimed"
        );
    }
    Ok(())
}

/// Counts the pending actions every [`DEPTH_POLL`].
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
                if failures.is_multiple_of(50) {
                    tracing::warn!(error = %e, "depth count failed; keeping the last");
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
struct Sampler {
    cfg: Arc<Config>,
    enqueued: Arc<AtomicU64>,
    depth: Arc<Depth>,
    claims: Arc<Mutex<Window>>,
    worker: Arc<Worker<job::Measured>>,
}

impl Sampler {
    fn completed(&self) -> u64 {
        let s = self.worker.stats();
        s.settled.load(Ordering::Relaxed) + s.failed.load(Ordering::Relaxed)
    }

    async fn run(self, stop: CancellationToken) {
        let period = Duration::from_secs(self.cfg.sample_every_s);
        let mut last = (
            Instant::now(),
            self.enqueued.load(Ordering::Relaxed),
            self.completed(),
        );
        loop {
            let (wait, at) = pacing::next_boundary(emit::now_since_epoch(), period);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return,
            }
            let now = (
                Instant::now(),
                self.enqueued.load(Ordering::Relaxed),
                self.completed(),
            );
            let dt = (now.0 - last.0).as_secs_f64().max(1e-3);
            let rates = ((now.1 - last.1) as f64 / dt, (now.2 - last.2) as f64 / dt);
            last = now;
            self.emit_tick(at, rates);
        }
    }

    /// One record per metric, all stamped with the boundary `at`. A window
    /// in which no job started gives 0 for the percentiles.
    fn emit_tick(&self, at: Duration, (enqueue_rate, completion_rate): (f64, f64)) {
        let t = emit::iso(at);
        let p = {
            let mut w = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            w.percentiles(at.as_secs().saturating_sub(1))
        };
        let (p50, p95, p99) = p.map_or((0.0, 0.0, 0.0), |p| (p.p50_ms, p.p95_ms, p.p99_ms));
        let (window, every) = (
            self.cfg.latency_window_s as f64,
            self.cfg.sample_every_s as f64,
        );
        for (metric, value, window_s) in [
            ("claim_p50_ms", p50, window),
            ("claim_p95_ms", p95, window),
            ("claim_p99_ms", p99, window),
            ("enqueue_rate", enqueue_rate, every),
            ("completion_rate", completion_rate, every),
            ("queue_depth", self.depth.last() as f64, 0.0),
        ] {
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
