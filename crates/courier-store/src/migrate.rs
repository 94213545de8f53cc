//! Versioned SQL migrations, embedded in the binary and applied in order,
//! each once, under an advisory lock so concurrent starters do not race.

use crate::StoreError;

/// `(version, name, sql)`, in order. Add a file and a line; never edit an
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
];

/// A lock id for `pg_advisory_xact_lock`, fixed for courier's migrations.
const LOCK_ID: i64 = 0x0063_6f75_7269_6572;

/// Applies every migration not yet applied; returns how many it applied.
pub async fn run(client: &mut tokio_postgres::Client) -> Result<usize, StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_ID])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM schema_migrations", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut count = 0;
    for (version, name, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(|e| StoreError::Query(format!("migration {version} ({name}) failed: {e}")))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await?;
        count += 1;
    }
    tx.commit().await?;
    Ok(count)
}
