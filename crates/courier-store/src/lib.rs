//! courier-store: the only crate that speaks SQL.
//!
//! - [`cluster`]: the managed local PostgreSQL cluster.
//! - [`migrate`]: versioned SQL migrations (`migrations/*.sql`), applied on start.
//! - [`PgStore`]: every query, named entity-then-verb.
//! - `views`: read-only views for operators (the dashboard, the gauges).
//!
//! # Invariants
//! - Every write after a claim checks `(owner, epoch)`; zero rows is
//!   [`Fenced`], an expected outcome returned as data, not an error.
//! - Claims and heartbeats lock only with SKIP LOCKED (claims: store rows, then
//!   action rows; heartbeats: action rows by id): they never wait. Every lock
//!   that may wait is taken in one order: action row, then its outbox row
//!   (fenced writes, settles); outbox rows by action id, then their action
//!   rows (merges). Settles and fails release their store's in-flight slot by
//!   appending to `store_releases`, never by locking the store row. So
//!   concurrent claims, fenced writes, batches and merges cannot deadlock.
//! - A store's in-flight count (`store_in_flight`) never exceeds the cap: a
//!   claim folds only the releases it deletes, and a release it cannot see
//!   yet only makes it count more in flight.
//! - A report is merged forward only (courier-core's `merge`), in the same
//!   transaction as the webhook event id that carried it.

mod batch;
pub mod bench_views;
pub mod cluster;
pub mod migrate;
mod queries;
mod views;

pub use batch::*;
pub use queries::*;
pub use views::*;

use std::time::Duration;

/// Errors by what the caller does next.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database is unreachable or restarting, or the transaction was
    /// aborted for a retryable reason; a commit's outcome may be unknown.
    /// Retry after a pause: every write here is idempotent or re-checkable.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A bug or a broken invariant (a constraint refused a write): do not retry.
    #[error("database error: {0}")]
    Query(String),
}

impl StoreError {
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        if let Some(db) = e.as_db_error() {
            let code = db.code().code();
            // 08: connection exceptions; 57P0x: shutdown and restart;
            // 40001 / 40P01: serialization failure and deadlock; 53: resources;
            // 57014 / 55P03: a statement or lock time-out (a busy database).
            if code.starts_with("08")
                || code.starts_with("57P")
                || code.starts_with("53")
                || code == "40001"
                || code == "40P01"
                || code == "57014"
                || code == "55P03"
            {
                return StoreError::Unavailable(format!("{e}: {} ({code})", db.message()));
            }
            return StoreError::Query(format!("{e}: {}", db.message()));
        }
        // A value that does not fit its column or parameter is our bug, not
        // an outage: retrying would repeat it forever.
        let text = e.to_string();
        if text.starts_with("error serializing")
            || text.starts_with("error deserializing")
            || text.starts_with("invalid column")
            || text.starts_with("query returned an unexpected number of rows")
            || text.starts_with("expected ")
        {
            return StoreError::Query(format!("{text}: {:?}", std::error::Error::source(&e)));
        }
        // No database error: the connection broke, closed or timed out.
        StoreError::Unavailable(text)
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub url: String,
    pub pool_size_max: usize,
    /// How long to wait for a connection from the pool.
    pub connect_timeout: Duration,
    /// Apply pending migrations on connect (off for read-only tools).
    pub migrate: bool,
}

impl StoreConfig {
    pub fn new(url: impl Into<String>) -> Self {
        StoreConfig {
            url: url.into(),
            pool_size_max: 8,
            connect_timeout: Duration::from_secs(5),
            migrate: true,
        }
    }
}

/// Drops and creates a database on a server (for throwaway runs: the demo,
/// benchmarks) and returns its URL. `server_url` names any database on it.
pub async fn database_recreate(server_url: &str, name: &str) -> Result<String, StoreError> {
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(StoreError::Query(format!("bad database name {name:?}")));
    }
    let (client, conn) = tokio_postgres::connect(server_url, tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    drop(client);
    let _ = conn.await;
    match server_url.rfind('/') {
        Some(i) if !server_url[..i].ends_with('/') => Ok(format!("{}/{name}", &server_url[..i])),
        _ => Err(StoreError::Query(format!(
            "cannot find the database name in {server_url}"
        ))),
    }
}
