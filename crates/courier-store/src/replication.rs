//! Which node the store is connected to and how far its standbys are behind,
//! read from PostgreSQL's own views: the server's address from the
//! connection (`inet_server_addr()`, `inet_server_port()`),
//! `pg_is_in_recovery()`, the timeline of the current WAL file, and `pg_stat_replication` (one row per standby
//! streaming from this node; none when there are no standbys).
//!
//! # Invariants
//! - Read-only and cheap: two catalog functions and one view of the WAL
//!   senders' shared memory, no table; the dashboard's sampler reads it in
//!   its snapshot's transaction.
//! - The lags are the server's: `write_lag` and `replay_lag` (NULL until a
//!   standby has reported, and again once it has caught up and is idle), and
//!   the bytes between this node's current WAL position and what each standby
//!   has replayed (`pg_wal_lsn_diff`).

use crate::error::StoreError;
use serde::Serialize;

/// The node this connection reached, and its standbys.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Replication {
    /// `host:port` of the server, as the connection reached it (the socket
    /// directory's port for a Unix socket).
    pub node: String,
    /// True when the node is a primary (`pg_is_in_recovery()` is false).
    pub primary: bool,
    /// A primary's current timeline (from the name of its current WAL
    /// file): it moves on at each promotion. None on a standby.
    pub timeline: Option<i32>,
    /// One per standby streaming from this node.
    pub standbys: Vec<StandbyLag>,
}

/// One standby, as the primary sees it (`pg_stat_replication`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StandbyLag {
    /// `application_name` (Patroni sets the member's name).
    pub name: String,
    /// `client_addr`, when it connected over TCP.
    pub addr: Option<String>,
    /// `streaming`, `catchup`, ...
    pub state: String,
    /// `sync`, `quorum`, `potential` or `async`.
    pub sync_state: String,
    pub write_lag_ms: Option<f64>,
    pub replay_lag_ms: Option<f64>,
    /// WAL bytes this node has written that the standby has not replayed.
    pub replay_behind_bytes: Option<i64>,
}

const NODE_SQL: &str = "SELECT coalesce(host(inet_server_addr()), 'socket') || ':' \
     || coalesce(inet_server_port(), current_setting('port')::int), \
     NOT pg_is_in_recovery(), \
     CASE WHEN NOT pg_is_in_recovery() THEN \
       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END";

/// Only a primary has a current WAL insert position to measure from; a
/// cascading standby's senders are measured from what it has replayed.
const STANDBYS_SQL: &str = "SELECT coalesce(application_name, ''), host(client_addr), \
     coalesce(state, ''), coalesce(sync_state, ''), \
     extract(epoch FROM write_lag)::float8 * 1000, \
     extract(epoch FROM replay_lag)::float8 * 1000, \
     pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                          ELSE pg_current_wal_lsn() END, replay_lsn)::bigint \
     FROM pg_stat_replication ORDER BY application_name, pid";

/// Reads the node and its standbys on `client` (inside the caller's
/// transaction, if it has one).
pub(crate) async fn replication_read(
    client: &impl tokio_postgres::GenericClient,
) -> Result<Replication, StoreError> {
    let row = client.query_one(NODE_SQL, &[]).await?;
    let standbys = client
        .query(STANDBYS_SQL, &[])
        .await?
        .iter()
        .map(|r| StandbyLag {
            name: r.get(0),
            addr: r.get(1),
            state: r.get(2),
            sync_state: r.get(3),
            write_lag_ms: r.get(4),
            replay_lag_ms: r.get(5),
            replay_behind_bytes: r.get(6),
        })
        .collect();
    Ok(Replication {
        node: row.get(0),
        primary: row.get(1),
        timeline: row.get(2),
        standbys,
    })
}

impl crate::pool::PgStore {
    /// The node this store writes to and its standbys' lag (`courier status`).
    pub async fn replication(&self) -> Result<Replication, StoreError> {
        let client = self.client().await?;
        replication_read(&**client).await
    }
}
