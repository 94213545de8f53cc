//! `courier bench live-migration`: the newest migrations applied while
//! workers run against a large database. The database is seeded with
//! finished actions and brought back to before the live migrations, the
//! no-transaction halves of 13, 15 and 19 (14: the backfill of `actions_done`
//! from the whole history, then two `DROP INDEX CONCURRENTLY`; 16: two
//! more; 20: one more, the index the settle wrote before migration 19),
//! each undone by its entry in [`LIVE`]; then a pending backlog is
//! enqueued, workers claim and settle it while an enqueuer adds more, and
//! the runner applies the migrations. Nothing may be lost (every action
//! settled once, one message each at the stub) and no claim may take
//! longer than `claim_ms_max`.
//!
//! `blocking` is the negative control: the same statements without
//! CONCURRENTLY, in one transaction that first takes the lock creating
//! migrations 13's and 15's triggers takes (SHARE ROW EXCLUSIVE on
//! `actions` and `outbox`), as one transactional migration holding the
//! backfill would: writers (claims are writes) wait for the backfill.
//!
//! # Invariants
//! - The claims measured are the workers' own statements (`claim_us_max`),
//!   over the whole time the migration ran and the backlog drained.

use crate::harness::bench_worker;
use crate::harness::drain::{drain, Progress};
use crate::harness::server::{with_cluster, Statements};
use crate::history_views::HistoryViews;
use crate::BenchError;
use courier_core::Limits;
use courier_inproc::{StubProvider, WorkerPool};
use courier_store::migrate::{self, MIGRATIONS};
use courier_store::{ClaimMode, PgStore, StoreConfig};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct LiveMigrationConfig {
    /// Finished actions seeded before the run.
    pub actions: i64,
    /// Pending actions the workers drain while the migration runs.
    pub backlog: u32,
    /// Actions enqueued one by one (through the API's statement) meanwhile.
    pub enqueued_during: u32,
    pub workers: u32,
    /// Apply the live migrations' statements without CONCURRENTLY, in one
    /// transaction under the lock of migrations 13's and 15's triggers.
    pub blocking: bool,
    pub claim_ms_max: u64,
    pub timeout_s: u64,
}

impl LiveMigrationConfig {
    pub fn new(actions: i64) -> Self {
        LiveMigrationConfig {
            actions,
            backlog: 20_000,
            enqueued_during: 2_000,
            workers: 2,
            blocking: false,
            claim_ms_max: 1_000,
            timeout_s: 900,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LiveMigrationReport {
    pub actions_seeded: i64,
    pub migration: String,
    pub blocking: bool,
    pub migration_s: f64,
    pub settled: u64,
    pub expected: u64,
    pub messages: usize,
    pub claim_ms_max: f64,
    pub claim_ms_limit: u64,
    pub enqueue_ms_max: f64,
    /// Why the migration failed, if it did (the negative control's lock
    /// can end in a deadlock with the workers): reported, not raised, so
    /// the run still says what the claims waited.
    pub migration_error: Option<String>,
    pub passed: bool,
}

impl LiveMigrationReport {
    pub fn table(&self) -> String {
        format!(
            "| measure | value |\n|---|---:|\n| finished actions in the database | {} |\n| migrations | {} ({}) |\n| migration took (s) | {:.1} |\n| actions settled / expected | {} / {} |\n| messages at the provider stub | {} |\n| slowest claim statement (ms; limit {}) | {:.0} |\n| slowest enqueue meanwhile (ms) | {:.0} |\n| migration error | {} |\n\nwithin target: {}\n",
            self.actions_seeded,
            self.migration,
            if self.blocking { "in one transaction under the triggers' lock: the negative control" } else { "by the runner, outside any transaction" },
            self.migration_s,
            self.settled,
            self.expected,
            self.messages,
            self.claim_ms_limit,
            self.claim_ms_max,
            self.enqueue_ms_max,
            self.migration_error.as_deref().unwrap_or("none"),
            self.passed
        )
    }
}

/// The migrations this run applies live, each with what brings a migrated
/// database back to before it (run newest first). Before 14, actions_done
/// holds what finished since 13 (here: nothing, the worst case) and the
/// partial indexes of 12 stand; before 16, those of `outbox` stand.
pub const LIVE: &[(i32, &str)] = &[
    (
        14,
        "TRUNCATE actions_done;
         CREATE INDEX IF NOT EXISTS actions_lease ON actions (lease_until)
             WHERE state = 'claimed';
         CREATE INDEX IF NOT EXISTS actions_finished ON actions (done_at)
             WHERE state IN ('done', 'failed');
         ALTER TABLE actions RESET (fillfactor);",
    ),
    (
        16,
        "CREATE INDEX IF NOT EXISTS outbox_open ON outbox (created_at)
             WHERE status NOT IN ('delivered', 'failed');
         CREATE INDEX IF NOT EXISTS outbox_next_check ON outbox (next_check_at)
             WHERE next_check_at IS NOT NULL;
         ALTER TABLE outbox RESET (fillfactor);",
    ),
    (
        20,
        "CREATE INDEX IF NOT EXISTS outbox_accepted ON outbox (accepted_at, action_id)
             WHERE accepted_at IS NOT NULL;",
    ),
];

/// The live migrations as the runner knows them: (version, name, sql).
fn live_migrations() -> Result<Vec<&'static (i32, &'static str, &'static str)>, BenchError> {
    LIVE.iter()
        .map(|(v, _)| {
            MIGRATIONS
                .iter()
                .find(|m| m.0 == *v && migrate::is_no_transaction(m.2))
                .ok_or_else(|| BenchError::Task(format!("no no-transaction migration {v}")))
        })
        .collect()
}

/// Brings a migrated database back to before the live migrations and
/// forgets them.
async fn roll_back(store: &PgStore) -> Result<(), BenchError> {
    live_migrations()?;
    let c = store.client().await?;
    for (version, undo) in LIVE.iter().rev() {
        c.batch_execute(undo)
            .await
            .map_err(courier_store::StoreError::from)?;
        c.execute(
            "DELETE FROM schema_migrations WHERE version = $1",
            &[version],
        )
        .await
        .map_err(courier_store::StoreError::from)?;
    }
    Ok(())
}

/// Applies the live migrations: through the runner, or (the negative
/// control) their statements without CONCURRENTLY in one transaction under
/// the triggers' lock.
async fn apply(store: &PgStore, blocking: bool) -> Result<(), BenchError> {
    if !blocking {
        store.migrate().await?;
        return Ok(());
    }
    let mut c = store.client().await?;
    let tx = c
        .transaction()
        .await
        .map_err(courier_store::StoreError::from)?;
    tx.batch_execute("LOCK TABLE actions, outbox IN SHARE ROW EXCLUSIVE MODE")
        .await
        .map_err(courier_store::StoreError::from)?;
    for (version, name, sql) in live_migrations()? {
        let body: String = migrate::statements(sql)
            .iter()
            .map(|s| s.replace(" CONCURRENTLY", ""))
            .collect();
        tx.batch_execute(&body)
            .await
            .map_err(courier_store::StoreError::from)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await
        .map_err(courier_store::StoreError::from)?;
    }
    tx.commit().await.map_err(courier_store::StoreError::from)?;
    Ok(())
}

/// Seeds the finished history, rolls the live migrations back, and
/// enqueues the backlog.
async fn seed(cfg: &LiveMigrationConfig, store: &PgStore) -> Result<(), BenchError> {
    let mut first = 0;
    while first < cfg.actions {
        let n = 500_000.min(cfg.actions - first);
        store.history_seed(first, n, 100, 3_600.0).await?;
        first += n;
    }
    roll_back(store).await?;
    store.tables_vacuum_analyze().await?;
    let stores: Vec<String> = (0..100).map(|i| format!("store-{i:03}")).collect();
    store.actions_enqueue_bulk(&stores, cfg.backlog).await?;
    Ok(())
}

/// The run on a migrated database at `url` (seeded here).
pub async fn run(cfg: &LiveMigrationConfig, url: &str) -> Result<LiveMigrationReport, BenchError> {
    let mut sc = StoreConfig::new(url);
    sc.pool_size_max = 4;
    let store = PgStore::connect(&sc).await?;
    seed(cfg, &store).await?;

    let stub = StubProvider::new();
    let mut pool = start_workers(cfg, url, &stub).await?;
    let enqueuer = tokio::spawn(enqueue_slowly(store.clone(), cfg.enqueued_during));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let applied = apply(&store, cfg.blocking).await;
    let migration_s = t.elapsed().as_secs_f64();
    let enqueue_ms_max = enqueuer.await??;
    let expected = u64::from(cfg.backlog) + u64::from(cfg.enqueued_during);
    // Timed out or not, the workers stop; the report says what settled.
    let _ = drain(
        "the backlog",
        Duration::from_secs(cfg.timeout_s),
        Duration::from_millis(20),
        async || {
            Ok(Progress {
                done: pool.settled(),
                total: expected,
            })
        },
    )
    .await;
    pool.stop().await?;
    let migration_error = applied.err().map(|e| e.to_string());
    let claim_ms_max = pool
        .workers()
        .iter()
        .map(|w| w.stats().claim_us_max.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0) as f64
        / 1e3;
    let c = store.client().await?;
    let schema_current = migrate::status(&c).await?.is_current();
    let (settled, messages) = (pool.settled(), stub.messages());
    let migration = live_migrations()?
        .iter()
        .map(|(v, name, _)| format!("{v} ({name})"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(LiveMigrationReport {
        actions_seeded: cfg.actions,
        migration,
        blocking: cfg.blocking,
        migration_s,
        settled,
        expected,
        messages,
        claim_ms_max,
        claim_ms_limit: cfg.claim_ms_max,
        enqueue_ms_max,
        migration_error: migration_error.clone(),
        passed: migration_error.is_none()
            && schema_current
            && settled == expected
            && messages as u64 == expected
            && claim_ms_max <= cfg.claim_ms_max as f64,
    })
}

/// Starts `cfg.workers` in-process workers on `url` with the stub.
async fn start_workers(
    cfg: &LiveMigrationConfig,
    url: &str,
    stub: &StubProvider,
) -> Result<WorkerPool<StubProvider>, BenchError> {
    let mut wc = StoreConfig::new(url);
    wc.pool_size_max = 4;
    wc.migrate = false;
    let limits = Limits {
        claim_batch_max: 32,
        worker_concurrency_max: 64,
        store_in_flight_max: 16,
        ..Limits::default()
    };
    // No maintenance: the figures measure the migration alone.
    let worker = bench_worker(limits, ClaimMode::Fair, "live".into(), 20, 0);
    Ok(WorkerPool::start(cfg.workers, &wc, |_| stub.clone(), &worker).await?)
}

/// Enqueues `n` actions one by one through the enqueue statement; answers
/// the slowest, in milliseconds, retries included. An enqueue the database
/// refused for a reason worth retrying (a deadlock victim of the negative
/// control's lock, say) is sent again with its key, as a client would: the
/// key makes the retry a repeat, never a second action.
async fn enqueue_slowly(store: PgStore, n: u32) -> Result<f64, BenchError> {
    const TRIES_MAX: u32 = 100;
    let mut slowest = 0.0f64;
    for i in 0..n {
        let t = Instant::now();
        let action = courier_store::NewAction {
            store: format!("store-{:03}", i % 100),
            to: "+15551234567".into(),
            body: format!("during the migration {i}"),
            key: Some(format!("live-{i}")),
            ..Default::default()
        };
        let mut tries = 0;
        loop {
            tries += 1;
            match store.action_enqueue(&action).await {
                Ok(_) => break,
                Err(courier_store::EnqueueError::Store(e))
                    if e.is_unavailable() && tries < TRIES_MAX =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(BenchError::Task(e.to_string())),
            }
        }
        slowest = slowest.max(t.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(slowest)
}

/// The run on a PostgreSQL cluster of its own (a temporary directory),
/// stopped afterwards.
pub async fn run_own_cluster(cfg: &LiveMigrationConfig) -> Result<LiveMigrationReport, BenchError> {
    use courier_store::cluster::Cluster;
    let dir = crate::run_dir("courier-bench-live-migration-")?;
    let cluster = Cluster::new(dir.path().join("pg")).setting("synchronous_commit", "off");
    with_cluster(cluster, Statements::Off, async |server| {
        let url = courier_store::database_recreate(&server.url, "courier_live").await?;
        run(cfg, &url).await
    })
    .await
}
