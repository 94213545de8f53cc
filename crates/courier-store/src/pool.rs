//! The store's connection pool, its configuration and its clock.
//!
//! # Connecting to a primary that moves
//! The URL may name several hosts (`postgres://u@h1:5432,h2:5432/db?
//! target_session_attrs=read-write`): the pool tries them in order, each
//! within the connect time-out ([`crate::connect`]), and keeps the first
//! that takes writes (tokio-postgres asks `SHOW transaction_read_only`), so
//! a new connection reaches the current primary even past a frozen node.
//!
//! # Invariants
//! - A connection is handed out again only after it answered, within
//!   `StoreConfig::connect_timeout`, that it takes writes
//!   ([`RecycleCheck::Writable`], the default): a pooled connection to a node
//!   that was demoted, or set read-only, or that stopped answering is
//!   dropped, and the pool dials again through the URL. (A failing
//!   statement needs no check of its own: a broken connection is closed,
//!   and one answering 25006 is caught at its next checkout.)
//! - No statement of this crate cancels another (no cancel request, no
//!   client-side statement time-out on a write): a commit waiting for a
//!   synchronous standby is never cut short into a local-only commit that
//!   answers success (HAZARDS.md, "Failover").

use crate::clock::Clock;
use crate::connect::EachHost;
use crate::error::StoreError;
use deadpool_postgres::{ClientWrapper, HookError, Manager, ManagerConfig, Pool, RecyclingMethod};
use std::time::Duration;
use tokio_postgres::NoTls;

/// The store: a pool of connections to the courier database, and the clock
/// its statements read (the database's, except in tests).
#[derive(Clone)]
pub struct PgStore {
    pub(crate) pool: Pool,
    pub(crate) clock: Clock,
    /// The rules broken on purpose in a negative control (`negative`,
    /// feature `negative-controls`, tests only).
    #[cfg(feature = "negative-controls")]
    pub(crate) switches: crate::switches::Switches,
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub url: String,
    pub pool_size_max: usize,
    /// How long to wait for a connection from the pool.
    pub connect_timeout: Duration,
    /// Apply pending migrations on connect: on for the throwaway databases
    /// of the demo, chaos, benchmarks and tests; off for long-lived
    /// processes, which call [`PgStore::schema_check`] instead.
    pub migrate: bool,
    /// What the pool checks before it hands a connection out again.
    pub recycle_check: RecycleCheck,
}

/// What the pool checks before it hands out a connection it has used before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecycleCheck {
    /// That it is open and its server takes writes: one round trip,
    /// `SHOW transaction_read_only` (what `target_session_attrs=read-write`
    /// asks a new connection), bounded by the connect time-out. A node that
    /// turned read-only, was demoted or stopped answering loses its pooled
    /// connections at their next checkout.
    Writable,
    /// Only that it is open (deadpool's `RecyclingMethod::Fast`): no round
    /// trip, but a connection to a node that turned read-only is handed out
    /// again and again, each write refused with 25006. For measurements and
    /// the negative control of `tests/failover.rs` only.
    Open,
}

impl StoreConfig {
    pub fn new(url: impl Into<String>) -> Self {
        StoreConfig {
            url: url.into(),
            pool_size_max: 8,
            connect_timeout: Duration::from_secs(5),
            migrate: true,
            recycle_check: RecycleCheck::Writable,
        }
    }
}

/// The server options every pooled connection starts with (after any the
/// URL gives).
pub const JIT_OFF: &str = "-c jit=off";

impl PgStore {
    /// Connects, and applies migrations when `cfg.migrate` says so.
    pub async fn connect(cfg: &StoreConfig) -> Result<PgStore, StoreError> {
        let mut pg: tokio_postgres::Config = cfg
            .url
            .parse()
            .map_err(|e| StoreError::Query(format!("bad database URL: {e}")))?;
        pg.connect_timeout(cfg.connect_timeout);
        // No JIT: courier's statements are short, and a plan costed from
        // statistics taken mid-burst passes jit_above_cost while touching a
        // few pages. On the history benchmark `courier status`'s store
        // backlog ran in 5 ms and compiled for 510 ms (455 ms a read).
        let options = match pg.get_options() {
            Some(o) if !o.trim().is_empty() => format!("{o} {JIT_OFF}"),
            _ => JIT_OFF.to_string(),
        };
        pg.options(options);
        let dial = EachHost::new(&pg, cfg.connect_timeout);
        let dial_max = dial.dial_max();
        let mgr = Manager::from_connect(
            pg,
            dial,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let mut builder = Pool::builder(mgr)
            .max_size(cfg.pool_size_max)
            .wait_timeout(Some(cfg.connect_timeout))
            .create_timeout(Some(dial_max))
            .runtime(deadpool_postgres::Runtime::Tokio1);
        if cfg.recycle_check == RecycleCheck::Writable {
            builder = builder.post_recycle(writable_hook(cfg.connect_timeout));
        }
        let pool = builder
            .build()
            .map_err(|e| StoreError::Query(e.to_string()))?;
        let store = PgStore {
            pool,
            clock: Clock::database(),
            #[cfg(feature = "negative-controls")]
            switches: Default::default(),
        };
        let mut client = store.pool.get().await?;
        if cfg.migrate {
            crate::migrate::run(&mut client).await?;
        }
        Ok(store)
    }

    /// Refuses a schema this binary cannot work with (missing migrations,
    /// or ones it does not know): what long-lived processes call instead of
    /// migrating ([`crate::migrate`] says who migrates).
    pub async fn schema_check(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        crate::migrate::check(&client).await
    }

    /// Applies the migrations this database lacks (`courier db migrate`);
    /// returns how many.
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        let mut client = self.pool.get().await?;
        crate::migrate::run(&mut client).await
    }

    /// A pooled connection, for callers that enqueue inside their own transaction.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// The same store (the same pool) with its statements reading `clock`:
    /// for tests that move time instead of sleeping.
    pub fn with_clock(&self, clock: Clock) -> PgStore {
        PgStore {
            clock,
            ..self.clone()
        }
    }
}

/// The check of [`RecycleCheck::Writable`]: a connection whose server does
/// not answer `transaction_read_only = off` within `limit` is not handed out
/// (deadpool drops it and takes, or dials, another).
fn writable_hook(limit: Duration) -> deadpool_postgres::Hook {
    deadpool_postgres::Hook::async_fn(move |client: &mut ClientWrapper, _| {
        Box::pin(async move {
            let asked =
                tokio::time::timeout(limit, client.simple_query("SHOW transaction_read_only"));
            let answer = match asked.await {
                Err(_) => return Err(HookError::message("no answer to the writable check")),
                Ok(Err(e)) => return Err(HookError::Backend(e)),
                Ok(Ok(messages)) => messages,
            };
            let off = answer.iter().any(|m| {
                matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("off"))
            });
            if off {
                Ok(())
            } else {
                Err(HookError::message("the server does not take writes"))
            }
        })
    })
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
    let (client, conn) = tokio_postgres::connect(server_url, NoTls).await?;
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
