//! The demo run: the server, the flaky provider and several workers against
//! one database; every action enqueued at once through the API; progress
//! shown until every action is final; then the provider's log judged.

use crate::fleet::{spawn_service, Fleet, Proc};
use crate::spec::{FakeSpec, ProviderTarget, ServerSpec, WorkerSpec};
use crate::{judge, load, progress, RigError};
use courier_core::Limits;
use courier_store::{PgStore, StoreConfig, Summary};
use courier_verify::Report;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const API_KEY: &str = "demo-api-key";
pub const SECRET: &str = "demo-webhook-secret";

/// What the demo runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoConfig {
    pub actions: usize,
    pub stores: usize,
    pub workers: usize,
    /// Seed of the provider's faults and of the workers' jitter.
    pub seed: u64,
    /// Where logs and the provider's log go (cleared first).
    pub run_dir: PathBuf,
    pub timeout_s: u64,
}

/// The demo's system, started.
pub struct Demo {
    cfg: DemoConfig,
    store: PgStore,
    server: Proc,
    provider: Proc,
    fleet: Fleet,
    api: String,
    provider_url: String,
    log: PathBuf,
}

/// How the demo ended.
pub struct DemoOutcome {
    /// Every action reached a final status in time.
    pub finished: bool,
    /// When the last action became final (or the time ran out).
    pub finished_at: Instant,
    pub report: Report,
    pub summary: Summary,
    /// The counts by state when the watch ended, as one line.
    pub progress_line: Option<String>,
}

/// Clears `base` and creates it again.
pub fn fresh_dir(base: &Path) -> Result<PathBuf, RigError> {
    if base.exists() {
        std::fs::remove_dir_all(base).map_err(|e| RigError::io(base, e))?;
    }
    std::fs::create_dir_all(base).map_err(|e| RigError::io(base, e))?;
    Ok(base.to_path_buf())
}

impl Demo {
    /// Starts the server, the provider and the workers (`exe` is the
    /// courier binary) against `database_url`, in `cfg.run_dir` (which must
    /// exist: see [`fresh_dir`]).
    pub async fn start(exe: &Path, cfg: DemoConfig, database_url: &str) -> Result<Demo, RigError> {
        let dir = cfg.run_dir.clone();
        let store = PgStore::connect(&StoreConfig::new(database_url)).await?;
        let server = ServerSpec {
            database_url: database_url.to_string(),
            listen: "127.0.0.1:0".into(),
            webhook_secret: SECRET.into(),
            named: None,
        };
        let (server, api) =
            spawn_service(exe, "server", &server.args(), &dir.join("server.log")).await?;
        let log = dir.join("provider.jsonl");
        let fake = FakeSpec {
            listen: "127.0.0.1:0".into(),
            log: log.clone(),
            api_key: API_KEY.into(),
            webhook_secret: SECRET.into(),
            seed: cfg.seed,
            modes: crate::spec::FakeModes::default(),
            dialect: "contract".into(),
        };
        let (provider, provider_url) =
            spawn_service(exe, "provider", &fake.args(), &dir.join("provider.log")).await?;
        let worker = WorkerSpec {
            database_url: database_url.to_string(),
            provider: ProviderTarget {
                url: provider_url.clone(),
                api_key: API_KEY.into(),
                callback_url: Some(format!("{api}/v1/webhooks/provider")),
            },
            named: None,
            limits: Limits::default(),
            retention: courier_core::retention::Retention::default(),
            tier: courier_core::Tier::A,
            unsafe_resend: None,
            unsafe_ignore_expiry: false,
            unshared_gate: false,
        };
        let seeds = (0..cfg.workers as u64).map(|i| cfg.seed.wrapping_mul(1000).wrapping_add(i));
        let fleet = Fleet::start(exe, worker, &dir, seeds)?;
        Ok(Demo {
            cfg,
            store,
            server,
            provider,
            fleet,
            api,
            provider_url,
            log,
        })
    }

    pub fn api(&self) -> &str {
        &self.api
    }

    pub fn provider_url(&self) -> &str {
        &self.provider_url
    }

    /// Enqueues every action, waits until all are final (or the time is
    /// up), stops the processes and judges the provider's log.
    pub async fn run(self) -> Result<DemoOutcome, RigError> {
        let cfg = &self.cfg;
        load::enqueue_all(&load::client(&self.api)?, cfg.actions, cfg.stores).await?;
        let timeout = Duration::from_secs(cfg.timeout_s);
        let (finished, last) = progress::watch(&self.store, cfg.actions, timeout).await;
        let finished_at = Instant::now();
        self.fleet.stop(Duration::from_secs(10)).await?;
        self.server.stop(Duration::from_secs(5)).await?;
        self.provider.stop(Duration::from_secs(5)).await?;
        let report = judge::verify_against(&self.store, &self.log).await?;
        let summary = self.store.summary(1800).await?;
        Ok(DemoOutcome {
            finished,
            finished_at,
            report,
            summary,
            progress_line: last.as_ref().map(progress::Bars::line),
        })
    }
}
