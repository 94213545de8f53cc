//! The benchmarks' SQL (`courier bench`, crate `courier-bench`): read views of
//! finished runs, bulk enqueue, the pgbench ceiling's job table, and the
//! server's own counters (commits, statement statistics, backends).
//!
//! Nothing here is used by the courier at run time. It lives in this crate
//! because this is the only crate that speaks SQL.
//!
//! # Invariants
//! - Read views only read: they never change an action, an outbox row or a store.
//! - Bulk enqueue writes exactly what [`crate::action_enqueue`] writes for an
//!   action without a client key (a store row if missing, one pending action
//!   with a fresh uid), so the worker cannot tell the two apart.
//! - Server-level functions name their database explicitly and refuse names
//!   outside `[a-z0-9_]`, like [`crate::database_recreate`].

use crate::error::StoreError;
use crate::pool::PgStore;
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

/// Counts of actions by whether a worker still has something to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ActionProgress {
    pub total: i64,
    /// Pending or claimed.
    pub open: i64,
    /// Settled: dispatched, done or failed.
    pub settled: i64,
    pub done: i64,
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

/// One action as the queue benchmark's adapter is judged on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionOutcome {
    pub id: i64,
    pub state: String,
    /// The intent's idempotency key; None before the first claim.
    pub key: Option<String>,
    pub attempts: i32,
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

/// The largest bulk enqueue in one statement.
pub const BULK_ENQUEUE_MAX: u32 = 1_000_000;

/// SQL for a UUIDv7 at the time `at` (an SQL expression), as
/// `action_enqueue` draws in Rust (`Uuid::now_v7`): the milliseconds since
/// the epoch in the first 48 bits, version 7, the rest from
/// `gen_random_uuid()` (whose variant bits are already right). Seeded rows
/// then sit in the uid and key indexes where the enqueue puts real ones.
pub(crate) fn uuid_v7_sql(at: &str) -> String {
    format!(
        "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) \
         placing substring(int8send((extract(epoch FROM {at}) * 1000)::bigint) FROM 3) \
         FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
    )
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
/// [`PgStore::autovacuum_passes`].
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

impl PgStore {
    /// Every accepted action's enqueue-to-accepted latency and claim-to-settle
    /// hold, oldest enqueue first.
    pub async fn latencies_enqueue_to_accepted(&self) -> Result<Vec<ActionLatency>, StoreError> {
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

    /// How many actions there are, how many are still open, settled and done.
    pub async fn actions_progress(&self) -> Result<ActionProgress, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*),
                        count(*) FILTER (WHERE state IN ('pending', 'claimed')),
                        count(*) FILTER (WHERE state IN ('dispatched', 'done', 'failed')),
                        count(*) FILTER (WHERE state = 'done')
                 FROM actions",
                &[],
            )
            .await?;
        Ok(ActionProgress {
            total: row.get(0),
            open: row.get(1),
            settled: row.get(2),
            done: row.get(3),
        })
    }

    /// Actions waiting for a claim now (the queue benchmark's depth). One
    /// count of `actions_ready` (migration 12), so its cost follows the
    /// backlog, not the history.
    pub async fn actions_pending_count(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) FROM actions_ready", &[])
            .await?;
        Ok(row.get(0))
    }

    /// Every action's state and idempotency key (none before its first
    /// claim), by id: what the queue benchmark's adapter is judged on.
    pub async fn actions_outcomes(&self) -> Result<Vec<ActionOutcome>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT a.id, a.state, o.idem_key, coalesce(o.attempts, 0)
                 FROM actions a LEFT JOIN outbox o ON o.action_id = a.id
                 ORDER BY a.id",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| ActionOutcome {
                id: r.get(0),
                state: r.get(1),
                key: r.get(2),
                attempts: r.get(3),
            })
            .collect())
    }

    /// Enqueues `n` actions in one transaction through the set form
    /// (`courier.enqueue_many`, in calls of at most
    /// [`courier_core::ENQUEUE_MANY_MAX`]), spread round-robin over
    /// `stores`, each with no client key, a valid phone number and a short
    /// body. Returns how many it enqueued.
    pub async fn actions_enqueue_bulk(&self, stores: &[String], n: u32) -> Result<u64, StoreError> {
        if stores.is_empty() || n == 0 {
            return Ok(0);
        }
        if n > BULK_ENQUEUE_MAX {
            return Err(StoreError::Query(format!(
                "bulk enqueue of {n} actions is above {BULK_ENQUEUE_MAX}"
            )));
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let mut count = 0u64;
        let chunk = courier_core::ENQUEUE_MANY_MAX;
        for first in (0..n).step_by(chunk as usize) {
            let news: Vec<crate::NewAction> = (first..n.min(first + chunk))
                .map(|g| crate::NewAction {
                    store: stores[g as usize % stores.len()].clone(),
                    to: format!("+1555{:07}", g % 10_000_000),
                    body: format!("bench message {g}"),
                    key: None,
                    ..Default::default()
                })
                .collect();
            let made = crate::actions_enqueue_many(&*tx, &news)
                .await
                .map_err(|e| match e {
                    crate::EnqueueError::Store(e) => e,
                    other => StoreError::Query(format!("bulk enqueue: {other}")),
                })?;
            count += made.len() as u64;
        }
        tx.commit().await?;
        Ok(count)
    }

    /// Registers `n` stores named `{prefix}-NNNNNNN`, served a day ago and
    /// with no work: the idle tenants of `courier bench scale`, written in
    /// one statement of SQL rather than through the enqueue API (a million
    /// enqueues would measure the enqueue). Returns how many it added.
    pub async fn stores_seed_idle(&self, prefix: &str, n: u32) -> Result<u64, StoreError> {
        if n > BULK_ENQUEUE_MAX {
            return Err(StoreError::Query(format!(
                "{n} idle stores is above {BULK_ENQUEUE_MAX}"
            )));
        }
        let client = self.client().await?;
        Ok(client
            .execute(
                "INSERT INTO stores (store, last_served_at, created_at)
                 SELECT $1::text || '-' || lpad(g::text, 7, '0'),
                        now() - interval '1 day', now() - interval '30 days'
                 FROM generate_series(1, $2::bigint) AS g
                 ON CONFLICT (store) DO NOTHING",
                &[&prefix, &i64::from(n)],
            )
            .await?)
    }

    /// One fair claim of `n` actions (cap `cap`, intents written) run under
    /// `EXPLAIN (ANALYZE, BUFFERS)` and rolled back: the shared buffers it
    /// touched (its top plan node's) and its execution time in ms. Buffers
    /// do not depend on how busy the machine is, so they show what a claim
    /// reads where timings on a shared machine cannot.
    pub async fn claim_explained(&self, n: i64, cap: i32) -> Result<(u64, f64), StoreError> {
        let mut client = self.client().await?;
        // As claims run it: prepared, with the claims' planner settings, so
        // EXECUTE takes the generic plan (EXPLAIN of the statement with its
        // parameters bound would plan for their values). A prepared
        // statement is the session's, not the transaction's: deallocated
        // whatever the EXPLAIN gave.
        client
            .batch_execute(&format!(
                "PREPARE courier_explained_claim (text, bigint, double precision, integer, boolean, timestamptz) AS {}",
                crate::claim_statement(crate::ClaimMode::Fair)
            ))
            .await?;
        let explained = async {
            let tx = client.transaction().await?;
            tx.batch_execute(crate::PLAN_BY_KEY).await?;
            // Integers written in (EXPLAIN EXECUTE takes no parameters).
            let rows = tx
                .query(
                    &format!(
                        "EXPLAIN (ANALYZE, BUFFERS) EXECUTE courier_explained_claim('bench-explain', {n}, 60000, {cap}, true, NULL)"
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

    /// Autovacuum's and autoanalyze's passes over this database's tables so
    /// far (`pg_stat_user_tables`, counted when a pass ends).
    pub async fn autovacuum_passes(&self) -> Result<i64, StoreError> {
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

    /// Scans of table `table` so far (`pg_stat_user_tables`): sequential
    /// scans, rows they read, index scans. Backends publish their counts at
    /// most once a second, so poll it over seconds, not milliseconds.
    pub async fn table_scans(&self, table: &str) -> Result<TableScans, StoreError> {
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

    /// Refreshes the planner's statistics of every table (after a bulk load).
    pub async fn tables_analyze(&self) -> Result<(), StoreError> {
        self.client().await?.batch_execute("ANALYZE").await?;
        Ok(())
    }

    /// Creates the pgbench ceiling's job table with `rows` pending jobs
    /// (dropping an earlier one) and a partial index on the pending ones
    /// (the shape of courier's FIFO index before migration 12).
    pub async fn pgbench_jobs_create(&self, rows: u32) -> Result<(), StoreError> {
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

    /// Jobs marked done so far.
    pub async fn pgbench_jobs_done(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) FROM jobs WHERE state = 'done'", &[])
            .await?;
        Ok(row.get(0))
    }
}
