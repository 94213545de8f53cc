//! courier-rig: the system under test, as a library. `courier demo`,
//! `courier chaos` and the end-to-end tests assemble courier from it; the
//! CLI keeps only flags and output.
//!
//! - [`spec`]: typed configurations of each child process (the server, the
//!   fake provider, a worker), each turned into its subcommand's flags in one
//!   place, so a renamed flag breaks the build or the round-trip test of the
//!   CLI, not a run.
//! - [`database`]: the database under test: a throwaway cluster of its own
//!   (which the fault plan may crash-restart) or a server named by URL.
//! - [`fleet`]: child processes of the courier binary, read for their
//!   "listening on" line, signalled, and reaped; worker slots whose kills are
//!   confirmed from the wait status.
//! - [`ha`]: a local highly available PostgreSQL (3 etcd members, 3
//!   Patroni nodes), its processes our children, and the faults of the
//!   failover run (node death, postmaster kill, pause, switchover).
//! - [`failover`]: the failover run's HA faults, each confirmed (a
//!   leader on a later timeline), and its rows: actions that went backwards
//!   across a failover, acknowledged enqueues missing at the end.
//! - [`plan`]: the fault plan, seeded and pure (kills, PostgreSQL
//!   crash-restarts, freezes, each at a time within the span).
//! - [`load`]: the actions enqueued through the API (all at once, or spread
//!   over a span with one noisy store, a seeded share scheduled, expiring or
//!   cancelled).
//! - [`progress`]: progress bars by action state.
//! - [`judge`]: the courier's database in the verifier's terms
//!   ([`judge::expectations`]) and the verdict on a provider's log
//!   ([`judge::verify_against`]).
//! - [`demo`] and [`chaos`]: the two runs built from these parts.
//!
//! # Invariants
//! - Every child process this crate starts is killed when its handle is
//!   dropped (`kill_on_drop`), and a throwaway cluster is stopped when its
//!   [`database::Database`] is dropped: an error path leaves nothing running.
//! - A kill counts only when the wait status says the process died by that
//!   signal; anything else stops the run with an error.
//! - Everything random in a run comes from its seed ([`plan`], the worker
//!   seeds, the load); the seed is the caller's to print first.

pub mod chaos;
pub mod database;
pub mod demo;
pub mod failover;
pub mod fleet;
pub mod flow;
pub mod ha;
pub mod judge;
pub mod load;
pub mod plan;
pub mod progress;
pub mod spec;

use std::path::PathBuf;

/// Why a run could not be carried out. None of these is a verdict on
/// courier: a run that completes returns its verdict as data.
#[derive(Debug, thiserror::Error)]
pub enum RigError {
    /// A setting is out of range: fix the configuration.
    #[error("invalid rig settings: {0}")]
    Settings(String),
    #[error("PostgreSQL cluster: {0}")]
    Cluster(#[from] courier_store::cluster::ClusterError),
    #[error("database: {0}")]
    Store(#[from] courier_store::StoreError),
    /// A child process could not be started, or said nothing useful.
    #[error("{name}: {detail}")]
    Process { name: String, detail: String },
    /// A signalled process ended some other way: the run proves nothing.
    #[error("{name} did not die by {signal}: {status}")]
    NotKilled {
        name: String,
        signal: String,
        status: String,
    },
    #[error("enqueue: {0}")]
    Enqueue(String),
    /// The database holds what the judge cannot read as expectations.
    #[error("the courier's database as expectations: {0}")]
    Expectations(String),
    #[error("cannot verify the provider log {path}: {detail}")]
    Verify { path: PathBuf, detail: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("a rig task failed: {0}")]
    Task(String),
}

impl From<tokio::task::JoinError> for RigError {
    fn from(e: tokio::task::JoinError) -> Self {
        RigError::Task(e.to_string())
    }
}

impl RigError {
    fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RigError::Io {
            path: path.into(),
            source,
        }
    }
}
