//! `courier bench history`: does the cost of the hot paths grow with
//! history? Claim-to-settle and webhook merges on an empty database and on
//! one holding millions of finished actions (seeded with SQL, not through
//! the API), in alternating rounds of one run; and the time of `courier
//! status` (the store's `summary`) and of the dashboard's sample (the
//! snapshot and a page of latencies) on both.
//!
//! # Invariants
//! - Both databases live on one cluster and are measured in pairs of rounds
//!   of one run, the pair's order alternating (empty then full, full then
//!   empty, ...), so neither database always follows the other; ratios are
//!   of medians, and each pair's own ratio is shown beside them.
//! - Every round starts right after a checkpoint, so the full-page images a
//!   round writes for the pages it touches first do not depend on where the
//!   checkpoint cycle happened to be (the server's own checkpoints are
//!   spaced far enough apart not to fall inside a round; the report counts
//!   any that did).
//! - Every round's backlog is settled and merged completely before it is
//!   measured, and the stub saw one message per action.
//! - Every round starts once no autovacuum worker has run for a second (or
//!   after `autovacuum_wait_max_s`), so the vacuum that one round's churn
//!   calls for is not charged to the next round's database; autovacuum that
//!   starts inside a round is counted, with PostgreSQL's CPU per action and
//!   the host's steal, so a round's rate can be told from the machine's.
//! - A run counts only if no round's phase saw more steal than
//!   [`crate::cpu::STEAL_MAX_CORES`].

mod report;

pub use report::*;

use crate::cpu::{self, AutovacuumTicks, PgKind, Roles, Ticks};
use crate::cpu::{load_average, STEAL_MAX_CORES};
use crate::harness::bench_worker;
use crate::harness::drain::{drain, Progress};
use crate::harness::server::{with_cluster, Statements};
use crate::history_views::HistoryViews;
use crate::views::BenchViews;
use crate::views::{
    server_checkpoint, server_counters, statements_enable, statements_reset, statements_top,
    ServerCounters, StatementStat,
};
use crate::{bar, run_dir, BenchError};
use courier_core::{Limits, Status};
use courier_dispatch::metrics::SamplerConfig;
use courier_inproc::{StubProvider, WorkerPool};
use courier_store::cluster::Cluster;
use courier_store::{ClaimMode, PgStore, StoreConfig, WebhookIn};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const EMPTY_DB: &str = "courier_hist_empty";
const FULL_DB: &str = "courier_hist_full";
/// Actions seeded per statement.
const SEED_CHUNK: i64 = 500_000;
/// Acceptances trimmed per statement before each round.
const ACCEPTS_TRIM_ROWS: u32 = 100_000;
/// Statements shown per database for the last pair of rounds.
const STATEMENTS_MAX: i64 = 12;
/// How often the server's processes are read during a phase.
const CPU_READ_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct HistoryConfig {
    /// Finished actions seeded into the full database.
    pub actions: i64,
    pub stores: i64,
    /// Actions claimed, settled and merged per path and round.
    pub backlog: u32,
    pub rounds: u32,
    pub workers: u32,
    pub concurrency: u32,
    pub claim_batch_max: u32,
    pub store_in_flight_max: u32,
    pub pool_size_max: usize,
    /// Webhooks per merge batch, and merge batches in flight at once.
    pub merge_batch: usize,
    pub merge_tasks: usize,
    /// Times each status and sample read is taken (the median is reported).
    pub reads: u32,
    /// Keep the cluster here (and reuse a full database seeded before).
    pub pg_dir: Option<PathBuf>,
    /// Drop the full database at the end (its disk back).
    pub drop_after: bool,
    pub timeout_s: u64,
    /// The longest wait for autovacuum's workers to finish before a round.
    pub autovacuum_wait_max_s: u64,
    pub progress: bool,
}

impl HistoryConfig {
    pub fn new() -> Self {
        HistoryConfig {
            actions: 10_000_000,
            stores: 100,
            backlog: 100_000,
            rounds: 3,
            workers: 2,
            concurrency: 256,
            claim_batch_max: 64,
            store_in_flight_max: 16,
            pool_size_max: 4,
            merge_batch: 64,
            merge_tasks: 8,
            reads: 7,
            pg_dir: None,
            drop_after: false,
            timeout_s: 900,
            autovacuum_wait_max_s: 90,
            progress: true,
        }
    }

    pub fn smoke() -> Self {
        HistoryConfig {
            actions: 20_000,
            backlog: 500,
            rounds: 2,
            reads: 3,
            autovacuum_wait_max_s: 5,
            progress: false,
            ..Self::new()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=100_000_000).contains(&self.actions) || !(1..=1_000).contains(&self.stores) {
            return Err("actions must be within 1..=100000000 and stores within 1..=1000".into());
        }
        if !(1..=1_000_000).contains(&self.backlog) || !(1..=20).contains(&self.rounds) {
            return Err("backlog must be within 1..=1000000 and rounds within 1..=20".into());
        }
        if self.workers == 0
            || self.concurrency == 0
            || self.merge_batch == 0
            || self.merge_tasks == 0
        {
            return Err(
                "workers, concurrency, merge batch and merge tasks must be positive".into(),
            );
        }
        if !(1..=101).contains(&self.reads) || self.timeout_s == 0 {
            return Err("reads must be within 1..=101 and the time-out positive".into());
        }
        self.limits().map(|_| ())
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
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads the server's CPU while a phase runs.
struct PhaseWatch {
    roles: Roles,
    start: Ticks,
    t: Instant,
    stop: CancellationToken,
    readings: tokio::task::JoinHandle<AutovacuumTicks>,
}

impl PhaseWatch {
    fn start(postmaster: Option<u32>) -> PhaseWatch {
        let roles = Roles {
            postmaster,
            bench: std::process::id(),
            ..Roles::default()
        };
        let stop = CancellationToken::new();
        let token = stop.clone();
        let readings = tokio::task::spawn_blocking(move || {
            let mut av = AutovacuumTicks::default();
            while let Some(pm) = postmaster {
                av.observe(&cpu::pg_children(pm));
                if token.is_cancelled() {
                    break;
                }
                std::thread::sleep(CPU_READ_EVERY);
            }
            av
        });
        PhaseWatch {
            start: roles.read(),
            roles,
            t: Instant::now(),
            stop,
            readings,
        }
    }

    async fn finish(self, actions: u64) -> Result<PhaseCpu, BenchError> {
        let end = self.roles.read();
        let dt = self.t.elapsed().as_secs_f64();
        self.stop.cancel();
        let av = self.readings.await?;
        if self.roles.postmaster.is_none() {
            return Ok(PhaseCpu::default());
        }
        Ok(PhaseCpu {
            postgres_ms_per_action: cpu::ms_of(end.postgres.saturating_sub(self.start.postgres))
                / actions.max(1) as f64,
            autovacuum_cores: cpu::cores_of(av.ticks(), dt),
            steal_cores: cpu::cores_of(end.steal.saturating_sub(self.start.steal), dt),
        })
    }
}

/// Waits until no autovacuum worker has been seen for a second, at most
/// `wait_max`; answers the seconds waited.
async fn autovacuum_quiet(postmaster: Option<u32>, wait_max: Duration) -> Result<f64, BenchError> {
    let Some(pm) = postmaster else {
        return Ok(0.0);
    };
    let t = Instant::now();
    let mut quiet_since = Instant::now();
    while t.elapsed() < wait_max {
        let busy = tokio::task::spawn_blocking(move || {
            cpu::pg_children(pm)
                .iter()
                .any(|&(_, k, _)| k == PgKind::Autovacuum)
        })
        .await?;
        if busy {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(t.elapsed().as_secs_f64())
}

fn store_config(url: &str, pool: usize) -> StoreConfig {
    let mut sc = StoreConfig::new(url);
    sc.pool_size_max = pool;
    sc
}

pub async fn run(cfg: &HistoryConfig) -> Result<HistoryReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let started = Instant::now();
    let load_average_start = load_average();
    let temp = run_dir("courier-bench-history-")?;
    let pg_dir = cfg.pg_dir.clone().unwrap_or_else(|| temp.path().join("pg"));
    // Sized for the history it holds, as a server with 10,000,000 actions
    // would be: with the default 128 MB the seeding's inserts into the
    // random-key indexes (uid, idempotency keys) evict each other's pages,
    // and a small max_wal_size checkpoints every few seconds.
    let cluster = Cluster::new(pg_dir)
        .setting("synchronous_commit", "off")
        .setting("shared_buffers", "1GB")
        .setting("max_wal_size", "8GB")
        // Each round starts after a checkpoint of its own (`measure`); the
        // server's timed ones come no oftener than a pair of rounds lasts.
        .setting("checkpoint_timeout", "15min");
    // Every level: the merges' and settles' work is mostly in trigger
    // functions, whose statements a top-level count would hide.
    let track = Statements::All { planning: true };
    let mut report = with_cluster(cluster, track, async |server| {
        run_on(cfg, &server.url, server.postmaster).await
    })
    .await?;
    report.load_average_start = load_average_start;
    report.load_average_end = load_average();
    report.wall_time_s = started.elapsed().as_secs_f64();
    Ok(report)
}

async fn run_on(
    cfg: &HistoryConfig,
    server_url: &str,
    postmaster: Option<u32>,
) -> Result<HistoryReport, BenchError> {
    let limits = cfg.limits().map_err(BenchError::Settings)?;
    let (full_url, seed_s) = seeded(cfg, server_url).await?;
    let full = PgStore::connect(&store_config(&full_url, 2)).await?;
    let seeded_actions = full.counts().await?.get("actions.done");
    let full_db_bytes = full.tables_bytes().await?;
    // Each round waits for every connection to its database to close.
    drop(full);
    let statements = statements_enable(server_url).await?;
    let Rounds {
        rounds,
        empty_reads,
        statements_empty,
        statements_full,
    } = all_rounds(cfg, &limits, server_url, &full_url, statements, postmaster).await?;
    let full = PgStore::connect(&store_config(&full_url, 2)).await?;
    let full_reads = read_times(cfg, &full, &limits).await?;
    let t = Instant::now();
    full.actions_by_state_scanned().await?;
    let scanned_count_full_ms = t.elapsed().as_secs_f64() * 1e3;
    if cfg.drop_after {
        drop(full);
        courier_store::database_recreate(server_url, FULL_DB).await?;
    }
    let ratio = |f: fn(&RoundResult) -> f64| {
        let m = |db: &str| crate::stats::median(rounds.iter().filter(|r| r.database == db).map(f));
        crate::stats::ratio(m(FULL_DB), m(EMPTY_DB))
    };
    Ok(HistoryReport {
        seeded_actions,
        seed_s,
        full_db_bytes,
        claim_to_settle_ratio: ratio(|r| r.claim_to_settle_per_s),
        webhook_merges_ratio: ratio(|r| r.webhook_merges_per_s),
        rounds,
        empty: empty_reads.ok_or_else(|| BenchError::Task("no round ran".into()))?,
        full: full_reads,
        scanned_count_full_ms,
        backlog: u64::from(cfg.backlog),
        statements_empty,
        statements_full,
        load_average_start: String::new(),
        load_average_end: String::new(),
        wall_time_s: 0.0,
    })
}

/// Every round's pair of measurements, and what only the last round reads.
struct Rounds {
    rounds: Vec<RoundResult>,
    empty_reads: Option<ReadTimes>,
    statements_empty: Vec<StatementStat>,
    statements_full: Vec<StatementStat>,
}

/// The rounds, each measuring both databases in alternating order.
async fn all_rounds(
    cfg: &HistoryConfig,
    limits: &Limits,
    server_url: &str,
    full_url: &str,
    statements: bool,
    postmaster: Option<u32>,
) -> Result<Rounds, BenchError> {
    let mut rounds = Vec::new();
    let mut empty_reads = None;
    let (mut statements_empty, mut statements_full) = (Vec::new(), Vec::new());
    for round in 0..cfg.rounds {
        let empty_url = courier_store::database_recreate(server_url, EMPTY_DB).await?;
        let last = round + 1 == cfg.rounds;
        if statements && last {
            statements_reset(server_url).await?;
        }
        let mut pair = [(EMPTY_DB, empty_url.as_str()), (FULL_DB, full_url)];
        if round % 2 == 1 {
            pair.reverse();
        }
        for (i, (db, url)) in pair.into_iter().enumerate() {
            let place = Place {
                db,
                round,
                first: i == 0,
            };
            rounds.push(measure(cfg, limits, server_url, url, place, postmaster).await?);
        }
        if statements && last {
            statements_empty = statements_top(server_url, EMPTY_DB, STATEMENTS_MAX).await?;
            statements_full = statements_top(server_url, FULL_DB, STATEMENTS_MAX).await?;
        }
        if last {
            let empty = PgStore::connect(&store_config(&empty_url, 2)).await?;
            empty_reads = Some(read_times(cfg, &empty, limits).await?);
        }
    }
    Ok(Rounds {
        rounds,
        empty_reads,
        statements_empty,
        statements_full,
    })
}

/// The full database: reused when it holds the history asked for, else
/// seeded in chunks and vacuumed. Its URL and the seconds seeding took.
async fn seeded(cfg: &HistoryConfig, server_url: &str) -> Result<(String, f64), BenchError> {
    let url = match server_url.rfind('/') {
        Some(i) => format!("{}/{FULL_DB}", &server_url[..i]),
        None => return Err(BenchError::Task(format!("no database in {server_url}"))),
    };
    if let Ok(s) = PgStore::connect(&store_config(&url, 1)).await {
        if s.counts().await.map(|c| c.get("actions.done")).unwrap_or(0) >= cfg.actions {
            // Reused: each full round vacuums its small tables of work in
            // progress first (`measure`).
            return Ok((url, 0.0));
        }
    }
    let url = courier_store::database_recreate(server_url, FULL_DB).await?;
    let store = PgStore::connect(&store_config(&url, 1)).await?;
    let t = Instant::now();
    let b = bar(
        cfg.progress,
        cfg.actions as u64,
        "seeding [{bar:30}] {pos}/{len} finished actions ({elapsed})",
    );
    let mut first = 0;
    while first < cfg.actions {
        let n = SEED_CHUNK.min(cfg.actions - first);
        // Finished an hour or more ago, well inside the default retention.
        store.history_seed(first, n, cfg.stores, 3_600.0).await?;
        first += n;
        b.set_position(first as u64);
    }
    store.tables_vacuum_analyze().await?;
    b.finish();
    Ok((url, t.elapsed().as_secs_f64()))
}

/// A round's database and its place in the run.
struct Place {
    db: &'static str,
    round: u32,
    first: bool,
}

/// One round on one database: a backlog claimed and settled, then its
/// webhooks merged.
async fn measure(
    cfg: &HistoryConfig,
    limits: &Limits,
    server_url: &str,
    url: &str,
    place: Place,
    postmaster: Option<u32>,
) -> Result<RoundResult, BenchError> {
    let Place { db, round, first } = place;
    let store = PgStore::connect(&store_config(url, cfg.merge_tasks + 1)).await?;
    // The trim a worker's pruner runs by itself (this benchmark runs none):
    // the full database keeps acceptances of earlier rounds and runs.
    while store
        .accepts_trim(ACCEPTS_TRIM_ROWS, courier_store::ACCEPTS_KEEP_S)
        .await?
        .is_some_and(|n| n == u64::from(ACCEPTS_TRIM_ROWS))
    {}
    if db == FULL_DB {
        // The empty database is new each round; the full one carries the
        // dead rows of the earlier rounds' churn in its small tables of
        // work in progress, which autovacuum cleans on a server between two
        // bursts but not within the seconds between two rounds. Without
        // this, the full rounds slow round after round (runs J and J2, in
        // the git history of docs/benchmarks.md) for a reason that is not
        // the history.
        store.work_tables_vacuum_analyze().await?;
    }
    let stores: Vec<String> = (0..cfg.stores).map(|i| format!("store-{i:03}")).collect();
    store.actions_enqueue_bulk(&stores, cfg.backlog).await?;
    let autovacuum_wait_s =
        autovacuum_quiet(postmaster, Duration::from_secs(cfg.autovacuum_wait_max_s)).await?;
    server_checkpoint(server_url).await?;
    let autovacuum_before = store.autovacuum_passes().await?;
    let counters_before = server_counters(server_url, db).await?;
    let (c2s, claim_to_settle_cpu) =
        claim_to_settle(cfg, limits, url, db, round, postmaster).await?;
    let (merges, merges_cpu) = merge_all(cfg, &store, round, postmaster).await?;
    let autovacuum_passes = store.autovacuum_passes().await? - autovacuum_before;
    // Every backend publishes its counts as it exits.
    drop(store);
    crate::throughput::backends_gone(server_url, db).await?;
    let server = server_counters(server_url, db)
        .await?
        .since(&counters_before);
    Ok(RoundResult {
        database: db,
        round,
        first,
        claim_to_settle_per_s: f64::from(cfg.backlog) / c2s.as_secs_f64(),
        webhook_merges_per_s: merges,
        server,
        autovacuum_passes,
        autovacuum_wait_s,
        claim_to_settle_cpu,
        merges_cpu,
    })
}

/// The backlog claimed and settled by in-process workers with the stub:
/// how long it took, and the server's CPU meanwhile.
async fn claim_to_settle(
    cfg: &HistoryConfig,
    limits: &Limits,
    url: &str,
    db: &str,
    round: u32,
    postmaster: Option<u32>,
) -> Result<(Duration, PhaseCpu), BenchError> {
    let stub = StubProvider::new();
    let watch = PhaseWatch::start(postmaster);
    let t = Instant::now();
    let mut pool = WorkerPool::start(
        cfg.workers,
        &store_config(url, cfg.pool_size_max),
        |_| stub.clone(),
        &bench_worker(
            limits.clone(),
            ClaimMode::Fair,
            format!("hist-{round}"),
            20,
            0,
        ),
    )
    .await?;
    // Timed out or not, the workers stop first; the check below names what
    // was missing.
    let _ = drain(
        "claim to settle",
        Duration::from_secs(cfg.timeout_s).saturating_sub(t.elapsed()),
        Duration::from_millis(10),
        async || {
            Ok(Progress {
                done: pool.settled(),
                total: u64::from(cfg.backlog),
            })
        },
    )
    .await;
    let c2s = t.elapsed();
    let claim_to_settle_cpu = watch.finish(u64::from(cfg.backlog)).await?;
    pool.stop().await?;
    let settled = pool.settled();
    if settled < u64::from(cfg.backlog) || stub.messages() != cfg.backlog as usize {
        return Err(BenchError::Timeout {
            what: format!("claim to settle on {db}"),
            limit: Duration::from_secs(cfg.timeout_s),
            detail: format!(
                "{} settled, {} messages of {}",
                settled,
                stub.messages(),
                cfg.backlog
            ),
        });
    }
    Ok((c2s, claim_to_settle_cpu))
}

/// Merges a `delivered` webhook for every open intent, in batches from
/// several tasks (as the API's group commit does); answers merges per second
/// and the server's CPU over them.
async fn merge_all(
    cfg: &HistoryConfig,
    store: &PgStore,
    round: u32,
    postmaster: Option<u32>,
) -> Result<(f64, PhaseCpu), BenchError> {
    let keys = store.intents_open_keys(cfg.backlog).await?;
    if keys.len() != cfg.backlog as usize {
        return Err(BenchError::Task(format!(
            "{} open intents, expected {}",
            keys.len(),
            cfg.backlog
        )));
    }
    let events: Vec<WebhookIn> = keys
        .into_iter()
        .enumerate()
        .map(|(i, key)| WebhookIn {
            // One event id per intent, ever: ids made of the round and an
            // index repeated across runs on a reused database, and a repeat
            // is a duplicate webhook, not a merge (a run on the kept 10M
            // database left 100,000 intents open that way, and counted
            // 500,000 duplicates as merges).
            event_id: format!("evt-{key}"),
            key,
            status: Status::Delivered,
            message_id: format!("msg_r{round}_{i}"),
        })
        .collect();
    let chunks: Vec<Vec<WebhookIn>> = events.chunks(cfg.merge_batch).map(<[_]>::to_vec).collect();
    let queue = Arc::new(std::sync::Mutex::new(chunks));
    let watch = PhaseWatch::start(postmaster);
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..cfg.merge_tasks {
        let (q, s) = (queue.clone(), store.clone());
        tasks.spawn(async move {
            loop {
                let next = q.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let Some(batch) = next else {
                    return Ok::<_, BenchError>(());
                };
                for answer in s.webhooks_merge(&batch).await? {
                    answer?;
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let rate = f64::from(cfg.backlog) / t.elapsed().as_secs_f64();
    Ok((rate, watch.finish(u64::from(cfg.backlog)).await?))
}

/// Median times of `courier status`'s reads and of the dashboard's sample,
/// after folding the count deltas the rounds appended, as the workers'
/// pruner does every second when idle (this benchmark runs no pruner): the
/// reads then sum the counts and the deltas of the last second, not of
/// every write since seeding (173,000 unfolded deltas cost `counts_now` 40
/// ms on the 10,000,000-row database).
async fn read_times(
    cfg: &HistoryConfig,
    store: &PgStore,
    limits: &Limits,
) -> Result<ReadTimes, BenchError> {
    store.counts_fold().await?;
    let sampler = SamplerConfig::for_limits(limits, 2_000);
    let mut status = Vec::new();
    let mut sample = Vec::new();
    for _ in 0..cfg.reads {
        let t = Instant::now();
        store.summary(limits.intent_age_alert_s()).await?;
        status.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        store.ops_snapshot(&sampler.query).await?;
        let cursor = store.accepted_cursor_now().await?;
        store
            .accepted_latencies(cursor, sampler.accepted_per_sample_max)
            .await?;
        sample.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(ReadTimes {
        status_ms: crate::stats::median(status),
        sample_ms: crate::stats::median(sample),
    })
}
