//! The benchmarks' SQL: read views of finished runs (latencies, table
//! scans, a claim's plan), the pgbench ceiling's job table, and the server's
//! own counters (commits, statement statistics, backends).
//!
//! Nothing here is used by the courier at run time, so it lives with the
//! benchmarks rather than in `courier-store`, whose SQL is the courier's:
//! it reads the store's tables through [`PgStore::client`], and its
//! server-level functions open a connection of their own. The views of a
//! run's progress and the bulk fills that the adapter and the store's tests
//! share are `courier_store::run_views`.
//!
//! # Invariants
//! - Read views only read: they never change an action, an outbox row or a store.
//! - Server-level functions name their database explicitly and refuse names
//!   outside `[a-z0-9_]`, like `courier_store::database_recreate`.

use courier_store::run_views::BULK_ENQUEUE_MAX;
use courier_store::{PgStore, StoreError};
use serde::Serialize;

/// One accepted action, as the fairness benchmark reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionLatency {
    pub store: String,
    /// When it was enqueued, in milliseconds after the first enqueue of the database.
    pub enqueued_ms: f64,
    /// Enqueue to the provider's accepted answer being recorded
    /// (`outbox.accepted_at - actions.enqueued_at`), in microseconds.
    pub latency_us: u64,
    /// How long a worker held it: claim to settle
    /// (`actions.dispatched_at - actions.claimed_at`), in microseconds.
    pub hold_us: u64,
    /// How long it waited to be claimed: enqueue to its (latest) claim
    /// (`actions.claimed_at - actions.enqueued_at`), in microseconds.
    pub wait_us: u64,
}

/// A table's scan counters (`pg_stat_user_tables`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TableScans {
    pub seq_scan: i64,
    pub seq_tup_read: i64,
    pub idx_scan: i64,
    pub live: i64,
    pub dead: i64,
}

/// One row of `pg_stat_statements`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatementStat {
    /// The normalised statement, whitespace collapsed.
    pub query: String,
    pub calls: i64,
    pub total_exec_ms: f64,
    pub mean_exec_us: f64,
    /// Planning, when the server tracks it (`pg_stat_statements.track_planning`;
    /// 0 otherwise).
    pub total_plan_ms: f64,
    pub mean_plan_us: f64,
    pub rows: i64,
    /// Shared buffers the calls found in the cache, and read (from the
    /// operating system's cache or the disk), in all.
    pub shared_blks_hit: i64,
    pub shared_blks_read: i64,
}

/// The pgbench ceiling's transaction: claim the oldest pending job with
/// `FOR UPDATE SKIP LOCKED` and mark it done, in one statement (one
/// transaction, one round trip): the least a claim-and-complete can cost.
pub const PGBENCH_JOB_CLAIM_SCRIPT: &str = "UPDATE jobs SET state = 'done', done_at = now() \
WHERE id = (SELECT id FROM jobs WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED);\n";

fn check_database_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(StoreError::Query(format!("bad database name {name:?}")));
    }
    Ok(())
}

async fn server_client(server_url: &str) -> Result<tokio_postgres::Client, StoreError> {
    let (client, conn) = tokio_postgres::connect(server_url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "bench server connection ended");
        }
    });
    Ok(client)
}

/// Committed and rolled-back transactions of database `name` so far
/// (`pg_stat_database`). Read over a connection to another database
/// (`server_url`), so the reading does not count itself. Backends publish
/// their counts when they go idle (at most once a second) or exit: close
/// the pools and wait for [`database_backends`] to reach zero first.
pub async fn database_xact_counts(server_url: &str, name: &str) -> Result<(i64, i64), StoreError> {
    check_database_name(name)?;
    let client = server_client(server_url).await?;
    let row = client
        .query_opt(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1",
            &[&name],
        )
        .await?;
    row.map(|r| (r.get(0), r.get(1)))
        .ok_or_else(|| StoreError::Query(format!("no statistics for database {name:?}")))
}

/// Client backends connected to database `name` now (autovacuum's workers
/// are not counted: a pass over a table of the history outlasts a round).
pub async fn database_backends(server_url: &str, name: &str) -> Result<i64, StoreError> {
    check_database_name(name)?;
    let client = server_client(server_url).await?;
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = $1 AND backend_type = 'client backend'",
            &[&name],
        )
        .await?;
    Ok(row.get(0))
}

/// Sets `synchronous_commit` for every later connection to database `name`.
pub async fn database_synchronous_commit_set(
    server_url: &str,
    name: &str,
    on: bool,
) -> Result<(), StoreError> {
    check_database_name(name)?;
    let client = server_client(server_url).await?;
    let value = if on { "on" } else { "off" };
    client
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = {value}"
        ))
        .await?;
    Ok(())
}

/// The server's write and read counters at one moment, for differences
/// around a measured span: what happened on the server meanwhile that a
/// rate alone does not show (a checkpoint, autovacuum, reads that missed
/// shared buffers). Autovacuum's passes are counted per database by
/// `BenchViews::autovacuum_passes`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ServerCounters {
    /// WAL written (`pg_stat_wal.wal_bytes`) and its full-page images.
    pub wal_bytes: i64,
    pub wal_fpi: i64,
    /// Checkpoints begun, timed and requested (`pg_stat_bgwriter`).
    pub checkpoints: i64,
    /// Blocks of database `name` read from outside shared buffers, and found in them.
    pub blks_read: i64,
    pub blks_hit: i64,
}

impl ServerCounters {
    /// What changed from `before` to `self`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            wal_bytes: self.wal_bytes - before.wal_bytes,
            wal_fpi: self.wal_fpi - before.wal_fpi,
            checkpoints: self.checkpoints - before.checkpoints,
            blks_read: self.blks_read - before.blks_read,
            blks_hit: self.blks_hit - before.blks_hit,
        }
    }
}

/// The server's counters now, with database `name`'s blocks. Statistics are
/// published by a backend when it goes idle (at most once a second).
pub async fn server_counters(server_url: &str, name: &str) -> Result<ServerCounters, StoreError> {
    check_database_name(name)?;
    let client = server_client(server_url).await?;
    let r = client
        .query_one(
            "SELECT w.wal_bytes::bigint, w.wal_fpi,
                    b.checkpoints_timed + b.checkpoints_req,
                    d.blks_read, d.blks_hit
             FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_database d
             WHERE d.datname = $1",
            &[&name],
        )
        .await?;
    Ok(ServerCounters {
        wal_bytes: r.get(0),
        wal_fpi: r.get(1),
        checkpoints: r.get(2),
        blks_read: r.get(3),
        blks_hit: r.get(4),
    })
}

/// Runs a checkpoint now and waits for it: a measured span that starts
/// after one writes full-page images for what it touches the same way
/// whichever database it runs on.
pub async fn server_checkpoint(server_url: &str) -> Result<(), StoreError> {
    let client = server_client(server_url).await?;
    client.batch_execute("CHECKPOINT").await?;
    Ok(())
}

/// Creates `pg_stat_statements` in the database of `server_url` if the server
/// loaded it (`shared_preload_libraries`); false when it is not available.
pub async fn statements_enable(server_url: &str) -> Result<bool, StoreError> {
    let client = server_client(server_url).await?;
    let loaded: String = client
        .query_one("SELECT current_setting('shared_preload_libraries')", &[])
        .await?
        .get(0);
    if !loaded.split(',').any(|l| l.trim() == "pg_stat_statements") {
        return Ok(false);
    }
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await?;
    Ok(true)
}

/// Forgets every statement statistic of the server.
pub async fn statements_reset(server_url: &str) -> Result<(), StoreError> {
    let client = server_client(server_url).await?;
    client
        .batch_execute("SELECT pg_stat_statements_reset()")
        .await?;
    Ok(())
}

/// The statements of database `name` that took the most execution time,
/// their text without SQL comments (each statement file opens with one) and
/// with its white space collapsed.
pub async fn statements_top(
    server_url: &str,
    name: &str,
    limit: i64,
) -> Result<Vec<StatementStat>, StoreError> {
    check_database_name(name)?;
    let client = server_client(server_url).await?;
    let rows = client
        .query(
            "SELECT btrim(regexp_replace(regexp_replace(s.query, '--[^\\n]*', '', 'g'), '\\s+', ' ', 'g')),
                    s.calls, s.total_exec_time,
                    s.mean_exec_time * 1000, s.rows, s.total_plan_time, s.mean_plan_time * 1000,
                    s.shared_blks_hit, s.shared_blks_read
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = $1
             ORDER BY s.total_exec_time + s.total_plan_time DESC
             LIMIT $2",
            &[&name, &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StatementStat {
            query: r.get(0),
            calls: r.get(1),
            total_exec_ms: r.get(2),
            mean_exec_us: r.get(3),
            rows: r.get(4),
            total_plan_ms: r.get(5),
            mean_plan_us: r.get(6),
            shared_blks_hit: r.get(7),
            shared_blks_read: r.get(8),
        })
        .collect())
}

/// The benchmarks' reads and writes of one database, on the courier's store.
pub(crate) trait BenchViews {
    /// Every accepted action's enqueue-to-accepted latency and claim-to-settle
    /// hold, oldest enqueue first.
    async fn latencies_enqueue_to_accepted(&self) -> Result<Vec<ActionLatency>, StoreError>;

    /// One fair claim of `n` actions (cap `cap`, intents written) run under
    /// `EXPLAIN (ANALYZE, BUFFERS)` and rolled back: the shared buffers it
    /// touched (its top plan node's) and its execution time in ms. Buffers
    /// do not depend on how busy the machine is, so they show what a claim
    /// reads where timings on a shared machine cannot.
    async fn claim_explained(&self, n: i64, cap: i32) -> Result<(u64, f64), StoreError>;

    /// Autovacuum's and autoanalyze's passes over this database's tables so
    /// far (`pg_stat_user_tables`, counted when a pass ends).
    async fn autovacuum_passes(&self) -> Result<i64, StoreError>;

    /// Scans of table `table` so far (`pg_stat_user_tables`): sequential
    /// scans, rows they read, index scans. Backends publish their counts at
    /// most once a second, so poll it over seconds, not milliseconds.
    async fn table_scans(&self, table: &str) -> Result<TableScans, StoreError>;

    /// Refreshes the planner's statistics of every table (after a bulk load).
    async fn tables_analyze(&self) -> Result<(), StoreError>;

    /// Inserts `n` actions scheduled for tomorrow (a millisecond apart,
    /// from a day ahead), spread over `stores` (registered), in one
    /// statement: `scheduled` rows with their `actions_scheduled` rows, as
    /// the enqueue makes them.
    async fn actions_seed_scheduled(&self, stores: &[String], n: u32) -> Result<u64, StoreError>;

    /// Creates the pgbench ceiling's job table with `rows` pending jobs
    /// (dropping an earlier one) and a partial index on the pending ones
    /// (the shape of courier's FIFO index before migration 12).
    async fn pgbench_jobs_create(&self, rows: u32) -> Result<(), StoreError>;

    /// Jobs marked done so far.
    async fn pgbench_jobs_done(&self) -> Result<i64, StoreError>;
}

impl BenchViews for PgStore {
    async fn actions_seed_scheduled(&self, stores: &[String], n: u32) -> Result<u64, StoreError> {
        let client = self.client().await?;
        Ok(client
            .execute(
                "INSERT INTO actions (uid, store, recipient, body, state, not_before)
                 SELECT gen_random_uuid(), ($1::text[])[1 + g % cardinality($1::text[])],
                        '+15551234567', 'tomorrow ' || g, 'scheduled',
                        now() + interval '1 day' + g * interval '1 millisecond'
                 FROM generate_series(1, $2::bigint) AS g",
                &[&stores, &i64::from(n)],
            )
            .await?)
    }

    async fn latencies_enqueue_to_accepted(&self) -> Result<Vec<ActionLatency>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT a.store,
                        (extract(epoch FROM a.enqueued_at - t.first) * 1000)::float8,
                        greatest(round(extract(epoch FROM o.accepted_at - a.enqueued_at) * 1e6), 0)::bigint,
                        greatest(round(extract(epoch FROM coalesce(a.dispatched_at, o.accepted_at)
                                                         - coalesce(a.claimed_at, a.enqueued_at)) * 1e6), 0)::bigint,
                        greatest(round(extract(epoch FROM coalesce(a.claimed_at, a.enqueued_at)
                                                         - a.enqueued_at) * 1e6), 0)::bigint
                 FROM actions a
                 JOIN outbox o ON o.action_id = a.id
                 CROSS JOIN (SELECT min(enqueued_at) AS first FROM actions) t
                 WHERE o.accepted_at IS NOT NULL
                 ORDER BY a.enqueued_at, a.id",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| ActionLatency {
                store: r.get(0),
                enqueued_ms: r.get(1),
                latency_us: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
                hold_us: u64::try_from(r.get::<_, i64>(3)).unwrap_or(0),
                wait_us: u64::try_from(r.get::<_, i64>(4)).unwrap_or(0),
            })
            .collect())
    }

    async fn claim_explained(&self, n: i64, cap: i32) -> Result<(u64, f64), StoreError> {
        let mut client = self.client().await?;
        // As claims run it: prepared, with the claims' planner settings, so
        // EXECUTE takes the generic plan (EXPLAIN of the statement with its
        // parameters bound would plan for their values). A prepared
        // statement is the session's, not the transaction's: deallocated
        // whatever the EXPLAIN gave.
        client
            .batch_execute(&format!(
                "PREPARE courier_explained_claim (text, bigint, double precision, integer, boolean, timestamptz, text) AS {}",
                courier_store::claim_statement(courier_store::ClaimMode::Fair)
            ))
            .await?;
        let explained = async {
            let tx = client.transaction().await?;
            tx.batch_execute(courier_store::PLAN_BY_KEY).await?;
            // Integers written in (EXPLAIN EXECUTE takes no parameters).
            let rows = tx
                .query(
                    &format!(
                        "EXPLAIN (ANALYZE, BUFFERS) EXECUTE courier_explained_claim('bench-explain', {n}, 60000, {cap}, true, NULL, NULL)"
                    ),
                    &[],
                )
                .await?;
            tx.rollback().await?;
            Ok::<_, StoreError>(rows)
        }
        .await;
        client
            .batch_execute("DEALLOCATE courier_explained_claim")
            .await?;
        let rows = explained?;
        let lines: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let buffers = lines
            .iter()
            .find(|l| l.trim_start().starts_with("Buffers:"))
            .map_or(0, |l| {
                l.split_whitespace()
                    .filter_map(|w| w.split_once('='))
                    .filter(|(k, _)| matches!(*k, "hit" | "read"))
                    .filter_map(|(_, v)| v.trim_end_matches(',').parse::<u64>().ok())
                    .sum()
            });
        let execution_ms = lines
            .iter()
            .find_map(|l| l.trim().strip_prefix("Execution Time: "))
            .and_then(|v| v.trim_end_matches(" ms").parse().ok())
            .unwrap_or(f64::NAN);
        Ok((buffers, execution_ms))
    }

    async fn autovacuum_passes(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint
                 FROM pg_stat_user_tables",
                &[],
            )
            .await?;
        Ok(row.get(0))
    }

    async fn table_scans(&self, table: &str) -> Result<TableScans, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT seq_scan, seq_tup_read, coalesce(idx_scan, 0), n_live_tup, n_dead_tup
                 FROM pg_stat_user_tables WHERE relname = $1",
                &[&table],
            )
            .await?;
        Ok(row.map_or(TableScans::default(), |r| TableScans {
            seq_scan: r.get(0),
            seq_tup_read: r.get(1),
            idx_scan: r.get(2),
            live: r.get(3),
            dead: r.get(4),
        }))
    }

    async fn tables_analyze(&self) -> Result<(), StoreError> {
        self.client().await?.batch_execute("ANALYZE").await?;
        Ok(())
    }

    async fn pgbench_jobs_create(&self, rows: u32) -> Result<(), StoreError> {
        if rows > BULK_ENQUEUE_MAX * 10 {
            return Err(StoreError::Query(format!(
                "{rows} jobs is above {}",
                BULK_ENQUEUE_MAX * 10
            )));
        }
        let client = self.client().await?;
        client
            .batch_execute(
                "DROP TABLE IF EXISTS jobs;
                 CREATE TABLE jobs (
                     id      bigserial PRIMARY KEY,
                     state   text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
                     payload text NOT NULL,
                     done_at timestamptz);
                 CREATE INDEX jobs_pending ON jobs (id) WHERE state = 'pending';",
            )
            .await?;
        client
            .execute(
                "INSERT INTO jobs (payload) SELECT 'job ' || g FROM generate_series(1, $1::bigint) AS g",
                &[&i64::from(rows)],
            )
            .await?;
        client.batch_execute("VACUUM ANALYZE jobs").await?;
        Ok(())
    }

    async fn pgbench_jobs_done(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) FROM jobs WHERE state = 'done'", &[])
            .await?;
        Ok(row.get(0))
    }
}
