//! The database under test.
//!
//! A run either starts a throwaway cluster of its own (managed by
//! `courier_store::cluster`, stopped when the [`Database`] is dropped), whose
//! crash-restart is a fault the plan may schedule, or uses a server named by
//! URL (any PostgreSQL courier can reach, a multi-host URL of a cluster
//! included), which the run never stops or restarts.

use crate::RigError;
use courier_store::cluster::{Cluster, StopMode};
use std::path::Path;

/// Which database a run uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseSpec {
    /// A cluster of the run's own, under the run directory.
    Throwaway,
    /// An existing server; its files and processes are never touched.
    External { url: String },
}

/// A database a run is using.
pub struct Database {
    url: String,
    /// The throwaway cluster, when there is one.
    cluster: Option<Cluster>,
}

impl Database {
    /// Starts a throwaway cluster under `dir/pg`, or takes the URL as given.
    pub async fn start(spec: &DatabaseSpec, dir: &Path) -> Result<Self, RigError> {
        match spec {
            DatabaseSpec::External { url } => Ok(Database {
                url: url.clone(),
                cluster: None,
            }),
            DatabaseSpec::Throwaway => {
                let cluster = Cluster::new(dir.join("pg"));
                let c = cluster.clone();
                let url = tokio::task::spawn_blocking(move || c.start()).await??;
                Ok(Database {
                    url,
                    cluster: Some(cluster),
                })
            }
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether [`Database::crash_restart`] is possible.
    pub fn can_crash(&self) -> bool {
        self.cluster.is_some()
    }

    /// `pg_ctl stop -m immediate`, then start again (crash recovery).
    pub async fn crash_restart(&self) -> Result<(), RigError> {
        let Some(c) = self.cluster.clone() else {
            return Err(RigError::Settings(
                "a database named by URL is never crash-restarted".into(),
            ));
        };
        tokio::task::spawn_blocking(move || -> Result<(), RigError> {
            c.stop(StopMode::Immediate)?;
            c.start()?;
            Ok(())
        })
        .await?
    }

    /// Stops a throwaway cluster cleanly (a database named by URL is left
    /// as it is).
    pub async fn stop(mut self) -> Result<(), RigError> {
        if let Some(c) = self.cluster.take() {
            tokio::task::spawn_blocking(move || c.stop(StopMode::Fast)).await??;
        }
        Ok(())
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some(c) = &self.cluster {
            if let Err(e) = c.stop(StopMode::Immediate) {
                eprintln!("warning: could not stop the run's PostgreSQL: {e}");
            }
        }
    }
}
