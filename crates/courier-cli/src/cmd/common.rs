//! Flags shared by several subcommands: where the database is, the limits,
//! and the provider client.

use anyhow::Context;
use courier_core::{Limits, Retention, Tier};
use courier_provider::{ClientConfig, ProviderClient};
use courier_providers::settings::Settings;
use courier_providers::{AnyProvider, Named};
use courier_store::cluster::Cluster;
use courier_store::{PgStore, StoreConfig};
use std::path::PathBuf;
use std::time::Duration;

/// Where the database is: an existing server (`--database-url`) or the
/// managed local cluster under `--pg-dir`.
#[derive(clap::Args, Clone, Debug)]
pub struct DbArgs {
    /// Use this PostgreSQL server; its files are never touched.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    #[command(flatten)]
    pub pg: PgDirArg,
}

/// The managed cluster's directory.
#[derive(clap::Args, Clone, Debug)]
pub struct PgDirArg {
    /// Directory of the managed local cluster (used without --database-url).
    /// Default: .courier/pg in the working directory; as root (PostgreSQL
    /// then runs as `postgres`, which may not reach a home directory)
    /// /var/tmp/courier/NAME-HASH/pg, named after the working directory.
    #[arg(long, env = "COURIER_PG_DIR", global = true)]
    pub pg_dir: Option<PathBuf>,
}

impl PgDirArg {
    /// The directory: the one given, or the working directory's default.
    pub fn dir(&self) -> anyhow::Result<PathBuf> {
        match &self.pg_dir {
            Some(d) => Ok(d.clone()),
            None => {
                let cwd = std::env::current_dir().context("reading the working directory")?;
                Ok(courier_store::cluster::default_dir(&cwd))
            }
        }
    }

    /// `--pg-dir DIR` when the directory is not the default, for hints that
    /// tell the user which command to run next.
    pub fn flag_hint(&self) -> String {
        match &self.pg_dir {
            Some(d) => format!(" --pg-dir {}", d.display()),
            None => String::new(),
        }
    }
}

/// A database reached through [`DbArgs`].
pub struct Db {
    pub url: String,
    /// The managed cluster, when one is used.
    pub cluster: Option<Cluster>,
    /// Whether this process started that cluster (it was not running).
    pub started_here: bool,
}

impl DbArgs {
    /// The URL, starting the managed cluster on demand.
    pub async fn url(&self) -> anyhow::Result<String> {
        Ok(self.open().await?.url)
    }

    /// The URL and what was done to get it.
    pub async fn open(&self) -> anyhow::Result<Db> {
        if let Some(url) = &self.database_url {
            return Ok(Db {
                url: url.clone(),
                cluster: None,
                started_here: false,
            });
        }
        let dir = self.pg.dir()?;
        let cluster = Cluster::new(&dir);
        let c = cluster.clone();
        let (url, started_here) = tokio::task::spawn_blocking(move || {
            let was_running = c.running_port()?.is_some();
            c.start().map(|url| (url, !was_running))
        })
        .await?
        .with_context(|| format!("starting the managed PostgreSQL under {}", dir.display()))?;
        Ok(Db {
            url,
            cluster: Some(cluster),
            started_here,
        })
    }

    /// A store for a long-lived process (`serve`, `worker`, `status`): it
    /// does not migrate, and refuses a schema it cannot work with (missing
    /// migrations: run `courier db migrate`; unknown ones: a newer courier
    /// migrated it). Only `courier db migrate | start` and the throwaway
    /// databases of the demo, chaos and benchmarks migrate.
    pub async fn connect(&self, pool_size_max: usize) -> anyhow::Result<PgStore> {
        let store = self.connect_unchecked(pool_size_max).await?;
        store.schema_check().await?;
        Ok(store)
    }

    /// A store that neither migrates nor checks the schema.
    pub async fn connect_unchecked(&self, pool_size_max: usize) -> anyhow::Result<PgStore> {
        let url = self.url().await?;
        let mut cfg = StoreConfig::new(&url);
        cfg.pool_size_max = pool_size_max;
        cfg.migrate = false;
        PgStore::connect(&cfg)
            .await
            .with_context(|| format!("connecting to {}", redact(&url)))
    }
}

/// Hides a password in a URL before printing it.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The courier's limits as flags (defaults from `Limits::default()`).
#[derive(clap::Args, Clone, Debug)]
pub struct LimitArgs {
    #[arg(long, default_value_t = Limits::default().lease_ttl_ms)]
    pub lease_ttl_ms: u64,
    #[arg(long, default_value_t = Limits::default().heartbeat_interval_ms)]
    pub heartbeat_interval_ms: u64,
    #[arg(long, default_value_t = Limits::default().send_margin_ms)]
    pub send_margin_ms: u64,
    #[arg(long, default_value_t = Limits::default().request_timeout_ms)]
    pub request_timeout_ms: u64,
    #[arg(long, default_value_t = Limits::default().store_in_flight_max)]
    pub store_in_flight_max: u32,
    #[arg(long, default_value_t = Limits::default().claim_batch_max)]
    pub claim_batch_max: u32,
    /// Actions one worker process works on at once.
    #[arg(long, default_value_t = Limits::default().worker_concurrency_max)]
    pub concurrency: u32,
    #[arg(long, default_value_t = Limits::default().final_overdue_ms)]
    pub final_overdue_ms: u64,
    /// How long the provider remembers keys (the guarantee's horizon).
    #[arg(long, default_value_t = Limits::default().key_retention_s)]
    pub key_retention_s: u64,
    /// Report open intents older than this percentage of the key retention.
    #[arg(long, default_value_t = Limits::default().intent_age_alert_percent)]
    pub intent_age_alert_percent: u32,
    /// How long after a request the provider's lookup may still answer "not
    /// found" (at least the provider's lag): past an action's expires_at, a
    /// "not found" ends it expired only this long (plus a request's
    /// time-out) after the deadline.
    #[arg(long, default_value_t = Limits::default().lookup_lag_ms)]
    pub lookup_lag_ms: u64,
    /// How often the worker makes due scheduled actions pending and expires
    /// unclaimed ones past their deadline (1..=1000).
    #[arg(long, default_value_t = Limits::default().schedule_tick_ms)]
    pub schedule_tick_ms: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> anyhow::Result<Limits> {
        let l = Limits {
            lease_ttl_ms: self.lease_ttl_ms,
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            send_margin_ms: self.send_margin_ms,
            request_timeout_ms: self.request_timeout_ms,
            store_in_flight_max: self.store_in_flight_max,
            claim_batch_max: self.claim_batch_max,
            worker_concurrency_max: self.concurrency,
            final_overdue_ms: self.final_overdue_ms,
            key_retention_s: self.key_retention_s,
            intent_age_alert_percent: self.intent_age_alert_percent,
            lookup_lag_ms: self.lookup_lag_ms,
            schedule_tick_ms: self.schedule_tick_ms,
            ..Limits::default()
        };
        l.validate()?;
        Ok(l)
    }
}

/// The retention windows (`courier_core::Retention`; docs/operations.md
/// says why the defaults).
#[derive(clap::Args, Clone, Debug)]
pub struct RetentionArgs {
    /// Finished actions and their intents are removed this long after they
    /// finished. It is also the enqueue-repeat window: the same (store, key)
    /// is the same action while it exists, a new one after.
    #[arg(long, default_value_t = Retention::default().action_retention_s)]
    pub action_retention_s: u64,
    /// How long after an event's first POST the provider may still retry it.
    #[arg(long, default_value_t = Retention::default().webhook_retry_horizon_s)]
    pub webhook_retry_horizon_s: u64,
    /// Webhook event ids are removed this long after they arrived (above the horizon).
    #[arg(long, default_value_t = Retention::default().webhook_event_retention_s)]
    pub webhook_event_retention_s: u64,
    /// Rows of `events` are removed this long after they were recorded.
    #[arg(long, default_value_t = Retention::default().event_retention_s)]
    pub event_retention_s: u64,
    /// Rows one prune statement removes at most.
    #[arg(long, default_value_t = Retention::default().prune_batch_rows_max)]
    pub prune_batch_rows_max: u32,
    /// The pruner's pause when a round left nothing more to remove.
    #[arg(long, default_value_t = Retention::default().prune_interval_ms)]
    pub prune_interval_ms: u64,
}

impl RetentionArgs {
    /// The retention, checked against the limits it must outlast.
    pub fn retention(&self, limits: &Limits) -> anyhow::Result<Retention> {
        let r = Retention {
            action_retention_s: self.action_retention_s,
            webhook_retry_horizon_s: self.webhook_retry_horizon_s,
            webhook_event_retention_s: self.webhook_event_retention_s,
            event_retention_s: self.event_retention_s,
            prune_batch_rows_max: self.prune_batch_rows_max,
            prune_interval_ms: self.prune_interval_ms,
        };
        r.validate(limits)?;
        Ok(r)
    }
}

/// How to reach the provider.
#[derive(clap::Args, Clone, Debug)]
pub struct ProviderArgs {
    /// The provider: `contract` (courier's own contract,
    /// docs/provider-api.md) or a named one (twilio, telnyx, infobip:
    /// docs/providers.md), whose settings come from --credentials-file or
    /// the environment.
    #[arg(long = "provider", default_value = "contract")]
    pub provider_name: String,
    /// The provider's API (for a named provider, its public API unless
    /// given; a double's address in tests).
    #[arg(long, env = "COURIER_PROVIDER_URL")]
    pub provider_url: Option<String>,
    /// The contract provider's API key.
    #[arg(long, env = "COURIER_PROVIDER_API_KEY")]
    pub provider_api_key: Option<String>,
    /// Where the provider should send status webhooks (the server's
    /// `/v1/webhooks/provider`, or `/v1/webhooks/<name>` for a named one).
    #[arg(long, env = "COURIER_CALLBACK_URL")]
    pub callback_url: Option<String>,
    /// A named provider's settings as `NAME=value` lines (its credentials
    /// never reach the logs); the environment fills what the file lacks.
    #[arg(long, env = "COURIER_CREDENTIALS_FILE")]
    pub credentials_file: Option<std::path::PathBuf>,
}

/// The provider a worker runs with, and the best tier it allows.
pub struct ChosenProvider {
    pub client: AnyProvider,
    pub tier: Tier,
    /// `contract` or the named provider's name.
    pub name: String,
}

impl ProviderArgs {
    pub fn client(&self, limits: &Limits) -> anyhow::Result<ChosenProvider> {
        let timeout = Duration::from_millis(limits.request_timeout_ms);
        if self.provider_name == "contract" {
            let (Some(url), Some(key)) = (&self.provider_url, &self.provider_api_key) else {
                anyhow::bail!("the contract provider needs --provider-url and --provider-api-key");
            };
            let client = ProviderClient::new(ClientConfig {
                base_url: url.clone(),
                api_key: key.clone(),
                status_callback: self.callback_url.clone(),
                timeout,
            })?;
            return Ok(ChosenProvider {
                client: AnyProvider::Contract(client),
                tier: Tier::A,
                name: "contract".into(),
            });
        }
        let named: Named = self.provider_name.parse().map_err(anyhow::Error::msg)?;
        let settings = Settings::load(
            named.settings_names(),
            self.credentials_file.as_deref(),
            |k| std::env::var(k).ok(),
        )?;
        let url = match (&self.provider_url, named.default_base_url()) {
            (Some(u), _) => u.clone(),
            (None, Some(u)) => u.to_string(),
            (None, None) => {
                anyhow::bail!("{named} needs --provider-url (its API's address is per account)")
            }
        };
        named.check_limits(&settings, limits.key_retention_s)?;
        let client = named.client(&settings, &url, self.callback_url.as_deref(), timeout)?;
        Ok(ChosenProvider {
            client,
            tier: named.tier(&settings),
            name: named.as_str().to_string(),
        })
    }
}

/// A token cancelled on SIGTERM or Ctrl-C.
pub fn shutdown_on_signal() -> tokio_util::sync::CancellationToken {
    let token = tokio_util::sync::CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        t.cancel();
    });
    token
}
