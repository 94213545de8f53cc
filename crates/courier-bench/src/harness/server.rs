//! A benchmark's PostgreSQL cluster: started in a directory of its own,
//! with `pg_stat_statements` preloaded when the benchmark asks and this
//! PostgreSQL has it, and stopped whatever the run returned.

use crate::BenchError;
use courier_store::cluster::{find_binary, Cluster, StopMode};

/// What `pg_stat_statements` counts, when the server has the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Statements {
    /// Not loaded.
    Off,
    /// Top-level statements (`track = top`).
    Top { planning: bool },
    /// Every level, statements in functions and triggers too (`track = all`).
    All { planning: bool },
}

/// A started cluster, as a run's body sees it.
pub(crate) struct Server {
    /// The URL of its `postgres` database (a connection for server-level
    /// reads and for creating the run's own databases).
    pub url: String,
    /// The postmaster, whose children are the server's CPU time.
    pub postmaster: Option<u32>,
    /// Whether `pg_stat_statements` is loaded (asked for, and present).
    pub statements_loaded: bool,
    cluster: Cluster,
}

impl Server {
    /// The port it listens on (pgbench connects by port).
    pub async fn port(&self) -> Result<u16, BenchError> {
        let c = self.cluster.clone();
        tokio::task::spawn_blocking(move || c.running_port())
            .await??
            .ok_or_else(|| BenchError::Task("the cluster stopped".into()))
    }
}

/// Starts `cluster` (with `pg_stat_statements` as `statements` asks, when
/// this PostgreSQL has it), runs `body` on it and stops it, whatever `body`
/// returned: `body`'s error first, then the stop's.
pub(crate) async fn with_cluster<T>(
    cluster: Cluster,
    statements: Statements,
    body: impl AsyncFnOnce(&Server) -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    let loaded = statements != Statements::Off && statements_library_present();
    let cluster = if loaded {
        preload_statements(cluster, statements)
    } else {
        cluster
    };
    let c = cluster.clone();
    let url = tokio::task::spawn_blocking(move || c.start()).await??;
    let server = Server {
        url,
        postmaster: cluster.postmaster_pid(),
        statements_loaded: loaded,
        cluster,
    };
    let result = body(&server).await;
    let c = server.cluster.clone();
    let stopped = tokio::task::spawn_blocking(move || c.stop(StopMode::Fast)).await?;
    let value = result?;
    stopped?;
    Ok(value)
}

fn preload_statements(cluster: Cluster, statements: Statements) -> Cluster {
    let (track, planning) = match statements {
        Statements::Off => return cluster,
        Statements::Top { planning } => ("top", planning),
        Statements::All { planning } => ("all", planning),
    };
    let cluster = cluster
        .setting("shared_preload_libraries", "pg_stat_statements")
        .setting("pg_stat_statements.track", track);
    if planning {
        cluster.setting("pg_stat_statements.track_planning", "on")
    } else {
        cluster
    }
}

/// True when this PostgreSQL has pg_stat_statements (a server that cannot
/// load a preloaded library does not start, so look before asking for it).
fn statements_library_present() -> bool {
    // Follow a symlink on PATH to the versioned directory (bin/ next to lib/).
    find_binary("postgres")
        .ok()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| p.parent().and_then(|b| b.parent()).map(|d| d.join("lib")))
        .is_some_and(|lib| lib.join("pg_stat_statements.so").is_file())
}
