//! Versioned SQL migrations, embedded in the binary and applied in order,
//! each once, under an advisory lock so concurrent starters do not race.
//! What they make, all of them applied, is `schema.sql` beside them: read
//! that instead of replaying the files (a function may be redefined by
//! several).
//!
//! Who applies them: `courier db migrate` (and `courier db start`, and the
//! throwaway databases of the demo, chaos, benchmarks and tests, which
//! connect with [`StoreConfig::migrate`](crate::StoreConfig) on). Long-lived
//! processes (`courier worker`, `courier serve`, `courier status`) never
//! migrate: they [`check`] the schema and refuse to start against one that
//! is older than they need (run `courier db migrate` first) or newer than
//! they know (a newer binary migrated it: run that one). A worker already
//! running when a migration lands keeps running as long as the statements
//! of its binary keep working: migrations add tables, triggers, indexes and
//! functions and redefine functions, but they also drop what the statements
//! stopped needing (indexes in 2, 3, 7, 12, 14, 16 and 20, constraints in 2
//! and 11, a function in 10), each saying why in its own comments.
//!
//! Two kinds of migration:
//! - **transactional** (the default): the whole file and its
//!   `schema_migrations` row in one transaction;
//! - **no-transaction**, marked by a first line `-- courier:no-transaction`:
//!   its statements (each ending with `;` at the end of a line) run one by
//!   one outside any transaction, as `CREATE INDEX CONCURRENTLY` must; the
//!   row is written after the last one succeeded, so a run cut short is
//!   repeated from the top, and such a file must be safe to repeat
//!   (`DROP INDEX CONCURRENTLY IF EXISTS` before each `CREATE`).
//!
//! # Invariants
//! - At most one runner works on a database at a time: a session advisory
//!   lock ([`LOCK_ID`]) is held from the first read of `schema_migrations`
//!   to the last write, and released before the connection is handed back.
//! - A migration is recorded only after all of it is applied.

use crate::StoreError;

/// `(version, name, sql)`, in order. Add a file and a line, then regenerate
/// `schema.sql` (the schema after every migration, checked by
/// `tests/schema_file.rs`, whose failure names the command); never edit an
/// applied migration.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "store_releases",
        include_str!("../migrations/0002_store_releases.sql"),
    ),
    (
        3,
        "fifo_index",
        include_str!("../migrations/0003_fifo_index.sql"),
    ),
    (
        4,
        "status_is_final",
        include_str!("../migrations/0004_status_is_final.sql"),
    ),
    (
        5,
        "store_work",
        include_str!("../migrations/0005_store_work.sql"),
    ),
    (6, "counts", include_str!("../migrations/0006_counts.sql")),
    (
        7,
        "prune_indexes",
        include_str!("../migrations/0007_prune_indexes.sql"),
    ),
    (
        8,
        "open_intents_walk",
        include_str!("../migrations/0008_open_intents_walk.sql"),
    ),
    (
        9,
        "releases_fold",
        include_str!("../migrations/0009_releases_fold.sql"),
    ),
    (
        10,
        "releases_fold_in_the_callers_snapshot",
        include_str!("../migrations/0010_releases_fold_in_the_callers_snapshot.sql"),
    ),
    (
        11,
        "enqueues_hold_no_store_row",
        include_str!("../migrations/0011_enqueues_hold_no_store_row.sql"),
    ),
    (
        12,
        "actions_ready",
        include_str!("../migrations/0012_actions_ready.sql"),
    ),
    (
        13,
        "hot_state_changes",
        include_str!("../migrations/0013_hot_state_changes.sql"),
    ),
    (
        14,
        "hot_state_changes_backfill",
        include_str!("../migrations/0014_hot_state_changes_backfill.sql"),
    ),
    (
        15,
        "intents_watched",
        include_str!("../migrations/0015_intents_watched.sql"),
    ),
    (
        16,
        "intents_watched_indexes",
        include_str!("../migrations/0016_intents_watched_indexes.sql"),
    ),
    (
        17,
        "side_triggers_by_key",
        include_str!("../migrations/0017_side_triggers_by_key.sql"),
    ),
    (
        18,
        "trigger_planner_settings",
        include_str!("../migrations/0018_trigger_planner_settings.sql"),
    ),
    (
        19,
        "outbox_accepts",
        include_str!("../migrations/0019_outbox_accepts.sql"),
    ),
    (
        20,
        "outbox_accepted_dropped",
        include_str!("../migrations/0020_outbox_accepted_dropped.sql"),
    ),
    (
        21,
        "enqueue_function",
        include_str!("../migrations/0021_enqueue_function.sql"),
    ),
    (
        22,
        "api_tokens",
        include_str!("../migrations/0022_api_tokens.sql"),
    ),
    (
        23,
        "time_and_intent",
        include_str!("../migrations/0023_time_and_intent.sql"),
    ),
    (
        24,
        "time_and_intent_validate",
        include_str!("../migrations/0024_time_and_intent_validate.sql"),
    ),
    (
        25,
        "guarantee_tiers",
        include_str!("../migrations/0025_guarantee_tiers.sql"),
    ),
    (
        26,
        "guarantee_tiers_validate",
        include_str!("../migrations/0026_guarantee_tiers_validate.sql"),
    ),
    (
        27,
        "flow_control",
        include_str!("../migrations/0027_flow_control.sql"),
    ),
    (
        28,
        "flow_control_validate",
        include_str!("../migrations/0028_flow_control_validate.sql"),
    ),
];

/// The first line that makes a migration run outside a transaction.
pub const NO_TRANSACTION: &str = "-- courier:no-transaction";

/// A lock id for the advisory lock, fixed for courier's migrations.
pub const LOCK_ID: i64 = 0x0063_6f75_7269_6572;

/// The newest schema version this binary knows.
pub fn version_known() -> i32 {
    MIGRATIONS.iter().map(|m| m.0).max().unwrap_or(0)
}

/// Whether a migration runs outside a transaction.
pub fn is_no_transaction(sql: &str) -> bool {
    sql.lines().next().map(str::trim) == Some(NO_TRANSACTION)
}

/// The statements of a no-transaction migration: split after each `;` that
/// ends a line; comment-only pieces are dropped.
pub fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        cur.push_str(line);
        cur.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(std::mem::take(&mut cur));
        }
    }
    out.push(cur);
    out.into_iter()
        .filter(|s| {
            s.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
        })
        .collect()
}

/// Applies every migration not yet applied; returns how many it applied.
pub async fn run(client: &mut tokio_postgres::Client) -> Result<usize, StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK_ID])
        .await?;
    let result = run_locked(client).await;
    // Released on every path: a pooled connection must not keep it.
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK_ID])
        .await;
    let count = result?;
    unlocked?;
    Ok(count)
}

async fn run_locked(client: &mut tokio_postgres::Client) -> Result<usize, StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version integer PRIMARY KEY,
                 name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await?;
    let applied = applied_versions(client).await?;
    let mut count = 0;
    for (version, name, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        let failed = |e: tokio_postgres::Error| {
            // The database's own message (tokio-postgres's Display says only
            // "db error").
            let detail = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.to_string());
            StoreError::Query(format!("migration {version} ({name}) failed: {detail}"))
        };
        if is_no_transaction(sql) {
            for statement in statements(sql) {
                client.batch_execute(&statement).await.map_err(failed)?;
            }
            record(&*client, *version, name).await?;
        } else {
            let tx = client.transaction().await?;
            tx.batch_execute(sql).await.map_err(failed)?;
            record(&tx, *version, name).await?;
            tx.commit().await?;
        }
        count += 1;
    }
    Ok(count)
}

async fn record(
    c: &impl tokio_postgres::GenericClient,
    version: i32,
    name: &str,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
        &[&version, &name],
    )
    .await?;
    Ok(())
}

async fn applied_versions(c: &tokio_postgres::Client) -> Result<Vec<i32>, StoreError> {
    Ok(c.query("SELECT version FROM schema_migrations", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Where a database's schema stands against this binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaStatus {
    /// Versions this binary knows that the database lacks.
    pub missing: Vec<i32>,
    /// Versions the database has that this binary does not know.
    pub unknown: Vec<i32>,
}

impl SchemaStatus {
    pub fn is_current(&self) -> bool {
        self.missing.is_empty() && self.unknown.is_empty()
    }
}

/// Compares the applied migrations with the ones this binary knows.
pub async fn status(client: &tokio_postgres::Client) -> Result<SchemaStatus, StoreError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await?
        .get(0);
    let applied = if exists {
        applied_versions(client).await?
    } else {
        Vec::new()
    };
    Ok(SchemaStatus {
        missing: MIGRATIONS
            .iter()
            .map(|m| m.0)
            .filter(|v| !applied.contains(v))
            .collect(),
        unknown: applied
            .iter()
            .copied()
            .filter(|v| MIGRATIONS.iter().all(|m| m.0 != *v))
            .collect(),
    })
}

/// Refuses a schema this binary cannot work with; the message says what to
/// run. Not retryable: a [`StoreError::Query`].
pub async fn check(client: &tokio_postgres::Client) -> Result<(), StoreError> {
    let s = status(client).await?;
    if !s.unknown.is_empty() {
        return Err(StoreError::Query(format!(
            "the database schema has migrations {:?} that this courier binary does not know (it knows up to version {}): a newer courier migrated it; run that version",
            s.unknown,
            version_known()
        )));
    }
    if !s.missing.is_empty() {
        return Err(StoreError::Query(format!(
            "the database schema lacks migrations {:?}: run `courier db migrate` first",
            s.missing
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_rise_and_only_marked_files_skip_the_transaction() {
        assert!(MIGRATIONS.windows(2).all(|w| w[0].0 < w[1].0));
        let marked: Vec<i32> = MIGRATIONS
            .iter()
            .filter(|m| is_no_transaction(m.2))
            .map(|m| m.0)
            .collect();
        assert_eq!(marked, vec![7, 14, 16, 20, 24, 26, 28]);
    }

    #[test]
    fn statements_split_at_line_ends_and_drop_comments() {
        let sql = "-- courier:no-transaction\n-- a note\nDROP INDEX CONCURRENTLY IF EXISTS a;\nCREATE INDEX CONCURRENTLY a\n  ON t (x);\n-- trailing\n";
        let s = statements(sql);
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s[1].contains("ON t (x);"));
        let v7 = MIGRATIONS.iter().find(|m| m.0 == 7).unwrap().2;
        assert_eq!(statements(v7).len(), 9);
        let v14 = MIGRATIONS.iter().find(|m| m.0 == 14).unwrap().2;
        let s = statements(v14);
        assert_eq!(s.len(), 4, "{s:?}");
        assert!(s[0].contains("\nINSERT INTO actions_done"), "{s:?}");
    }
}
