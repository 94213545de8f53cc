//! Errors by what the caller does next.

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
            // 08: connection exceptions; 57P0x: shutdown and restart (a
            // node that Patroni demotes or restarts); 25006: a read-only
            // transaction (a standby, a node that is being demoted or not yet
            // promoted, or one set read-only: nothing was written, and the
            // pool drops the connection at its next checkout);
            // 40001 / 40P01: serialization failure and deadlock; 53: resources;
            // 57014 / 55P03: a statement or lock time-out (a busy database).
            if code.starts_with("08")
                || code == "25006"
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
