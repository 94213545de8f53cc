//! How fast do actions get in? Actions enqueued a second by each way in,
//! all through the one SQL enqueue (`courier.enqueue`, `courier.enqueue_many`,
//! migration 21), with synchronous commit on and every trigger in place:
//!
//! - `http single`: `POST /v1/actions`, one action a request;
//! - `library single`: `PgStore::action_enqueue`, one action a call;
//! - `library batch`: `PgStore::actions_enqueue_many`, one statement a batch;
//! - `http batch`: `POST /v1/actions:batch`;
//! - `http single storm`: `http single` during 10,000 (`storm_failures`) failed
//!   authentications, whose call p99 is compared with `http single`'s.
//!
//! The HTTP paths send a store token, as production callers do
//! (`--no-tokens`: an open API).
//!
//! Each path runs on a fresh database of one cluster, for the same time,
//! with its own closed-loop clients (each sends its next call when the last
//! was answered). The figures are compared within one run.
//!
//! # Invariants
//! - An action counts only once its call was answered with success, and the
//!   database holds exactly the actions counted (checked after each path).
//! - Every call's latency is recorded; a failed call fails the run.

use crate::harness::server::{with_cluster, Statements};
use crate::stats::Percentiles;
use crate::{run_dir, BenchError};
use courier_core::Limits;
use courier_dispatch::server::ServerConfig;
use courier_store::cluster::Cluster;
use courier_store::{NewAction, PgStore, StoreConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::time::{Duration, Instant};

/// The set form must reach this many actions a second (issue 42's target).
pub const BATCH_TARGET_PER_S: f64 = 20_000.0;

#[derive(Debug, Clone, Serialize)]
pub struct EnqueueConfig {
    pub seed: u64,
    /// How long each path runs.
    pub seconds: f64,
    /// Closed-loop clients of the single paths.
    pub clients: u32,
    /// Closed-loop clients of the batch paths.
    pub batch_clients: u32,
    /// Actions a batch.
    pub batch: u32,
    /// Stores the actions are spread over.
    pub stores: u32,
    /// Whether every action carries a client key (the idempotent path).
    pub keyed: bool,
    /// Whether the HTTP API requires tokens (a store token naming the
    /// bench's stores), as it does in production; off: an open API.
    pub tokens: bool,
    /// Failed authentications of the storm path.
    pub storm_failures: u32,
}

impl EnqueueConfig {
    pub fn new(seed: u64) -> Self {
        EnqueueConfig {
            seed,
            seconds: 10.0,
            clients: 8,
            batch_clients: 2,
            batch: 1_000,
            stores: 100,
            keyed: true,
            tokens: true,
            storm_failures: 10_000,
        }
    }

    pub fn smoke(seed: u64) -> Self {
        EnqueueConfig {
            seconds: 0.5,
            clients: 2,
            batch_clients: 1,
            batch: 50,
            stores: 5,
            storm_failures: 400,
            ..Self::new(seed)
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(0.1..=600.0).contains(&self.seconds) {
            return Err("seconds must be within 0.1..=600".into());
        }
        if !(1..=256).contains(&self.clients) || !(1..=64).contains(&self.batch_clients) {
            return Err("clients must be within 1..=256 and batch clients within 1..=64".into());
        }
        if self.batch == 0 || self.batch > Limits::default().enqueue_batch_max {
            return Err(format!(
                "batch must be within 1..={} (the server's batch maximum)",
                Limits::default().enqueue_batch_max
            ));
        }
        if !(1..=100_000).contains(&self.stores) {
            return Err("stores must be within 1..=100000".into());
        }
        if !(1..=1_000_000).contains(&self.storm_failures) {
            return Err("storm failures must be within 1..=1000000".into());
        }
        Ok(())
    }
}

/// A way in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    HttpSingle,
    LibrarySingle,
    LibraryBatch,
    HttpBatch,
    /// `http single` while `storm_failures` requests with wrong tokens
    /// arrive from [`STORM_CLIENTS`] clients; it runs until they are done.
    HttpSingleStorm,
}

/// Clients sending the storm path's failed authentications.
pub const STORM_CLIENTS: u32 = 4;

impl Path {
    pub const ALL: [Path; 5] = [
        Path::HttpSingle,
        Path::LibrarySingle,
        Path::LibraryBatch,
        Path::HttpBatch,
        Path::HttpSingleStorm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Path::HttpSingle => "http single",
            Path::LibrarySingle => "library single",
            Path::LibraryBatch => "library batch",
            Path::HttpBatch => "http batch",
            Path::HttpSingleStorm => "http single storm",
        }
    }

    fn batched(self) -> bool {
        matches!(self, Path::LibraryBatch | Path::HttpBatch)
    }

    fn http(self) -> bool {
        matches!(
            self,
            Path::HttpSingle | Path::HttpBatch | Path::HttpSingleStorm
        )
    }
}

/// One path's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PathRate {
    pub path: Path,
    pub clients: u32,
    pub actions_per_call: u32,
    pub actions: u64,
    pub seconds: f64,
    pub actions_per_s: f64,
    /// Latency of one call (one action, or one batch).
    pub call_ms: Option<Percentiles>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnqueueReport {
    pub settings: EnqueueConfig,
    pub rates: Vec<PathRate>,
    /// The better of the two batch paths, against [`BATCH_TARGET_PER_S`]
    /// (none when no batch path ran).
    pub batch_best_per_s: Option<f64>,
    pub batch_target_met: Option<bool>,
    /// `http single storm`'s call p99 over `http single`'s (target <= 2).
    pub storm_p99_ratio: Option<f64>,
    pub wall_time_s: f64,
}

impl EnqueueReport {
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<16} {:>7} {:>9} {:>9} {:>9} {:>12} {:>12}\n",
            "path", "clients", "per call", "actions", "per s", "call p50 ms", "call p99 ms"
        );
        for r in &self.rates {
            let (p50, p99) = r
                .call_ms
                .as_ref()
                .map_or((0.0, 0.0), |p| (p.p50_ms, p.p99_ms));
            out += &format!(
                "{:<16} {:>7} {:>9} {:>9} {:>9.0} {:>12.2} {:>12.2}\n",
                r.path.name(),
                r.clients,
                r.actions_per_call,
                r.actions,
                r.actions_per_s,
                p50,
                p99
            );
        }
        if let (Some(best), Some(met)) = (self.batch_best_per_s, self.batch_target_met) {
            out += &format!(
                "batch form: {best:.0} actions/s (target >= {BATCH_TARGET_PER_S:.0}/s: {})\n",
                if met { "met" } else { "NOT met" }
            );
        }
        out
    }
}

/// Runs every path in `paths`, in order, on one cluster of its own.
pub async fn run(cfg: &EnqueueConfig, paths: &[Path]) -> Result<EnqueueReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let started = Instant::now();
    let dir = run_dir("courier-bench-enqueue-")?;
    let cluster = Cluster::new(dir.path().join("pg")).setting("synchronous_commit", "on");
    let rates = with_cluster(cluster, Statements::Off, async |server| {
        let mut rates = Vec::new();
        for &path in paths {
            rates.push(one_path(cfg, &server.url, path).await?);
        }
        Ok::<_, BenchError>(rates)
    })
    .await?;
    let batch_best_per_s = rates
        .iter()
        .filter(|r| r.path.batched())
        .map(|r| r.actions_per_s)
        .reduce(f64::max);
    let p99 = |p: Path| -> Option<f64> {
        rates
            .iter()
            .find(|r| r.path == p)?
            .call_ms
            .as_ref()
            .map(|c| c.p99_ms)
    };
    let storm_p99_ratio = p99(Path::HttpSingleStorm)
        .zip(p99(Path::HttpSingle))
        .map(|(storm, idle)| crate::stats::ratio(storm, idle));
    Ok(EnqueueReport {
        settings: cfg.clone(),
        rates,
        storm_p99_ratio,
        batch_best_per_s,
        batch_target_met: batch_best_per_s.map(|b| b >= BATCH_TARGET_PER_S),
        wall_time_s: started.elapsed().as_secs_f64(),
    })
}

/// What one client answers: the actions acknowledged, and each call's time
/// in us.
type Calls = Result<(u64, Vec<u64>), BenchError>;

/// The clients' actions acknowledged, and every call's time in us.
async fn collect_calls(tasks: Vec<tokio::task::JoinHandle<Calls>>) -> Calls {
    let mut actions = 0u64;
    let mut calls_us = Vec::new();
    for t in tasks {
        let (n, us) = t.await??;
        actions += n;
        calls_us.extend(us);
    }
    Ok((actions, calls_us))
}

/// One path on a fresh database: its clients for `cfg.seconds`, then the
/// count checked against the database.
async fn one_path(
    cfg: &EnqueueConfig,
    server_url: &str,
    path: Path,
) -> Result<PathRate, BenchError> {
    let name = format!("courier_bench_enqueue_{}", path.name().replace(' ', "_"));
    let url = courier_store::database_recreate(server_url, &name).await?;
    let clients = if path.batched() {
        cfg.batch_clients
    } else {
        cfg.clients
    };
    let mut sc = StoreConfig::new(&url);
    sc.pool_size_max = clients as usize + 2;
    sc.migrate = true;
    let store = PgStore::connect(&sc).await?;
    // The API stops when this path ends, so the next can drop its database.
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop_api = stop.clone().drop_guard();
    let api = if path.http() {
        Some(serve_api(cfg, store.clone(), stop.clone()).await?)
    } else {
        None
    };
    let storm_done = tokio_util::sync::CancellationToken::new();
    let (deadline, storm) = match (path, &api) {
        (Path::HttpSingleStorm, Some((base, _))) => (
            Instant::now() + Duration::from_secs(600),
            Some(tokio::spawn(storm(
                base.clone(),
                cfg.storm_failures,
                storm_done.clone(),
            ))),
        ),
        _ => (Instant::now() + Duration::from_secs_f64(cfg.seconds), None),
    };
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let caller = Caller::new(cfg, path, client, &store, api.clone());
            tokio::spawn(caller.run(deadline, storm_done.clone()))
        })
        .collect();
    if let Some(storm) = storm {
        storm.await??;
    }
    let (actions, calls_us) = collect_calls(tasks).await?;
    let seconds = started.elapsed().as_secs_f64();
    let held = store.summary(3_600).await?.total();
    if held != actions as i64 {
        return Err(BenchError::Task(format!(
            "{}: {actions} actions acknowledged, {held} in the database",
            path.name()
        )));
    }
    Ok(PathRate {
        path,
        clients,
        actions_per_call: if path.batched() { cfg.batch } else { 1 },
        actions,
        seconds,
        actions_per_s: actions as f64 / seconds,
        call_ms: Percentiles::from_us(calls_us),
    })
}

/// The HTTP API on a loopback port of its own: its base URL, and the
/// bearer header its callers send (a store token naming every bench store,
/// once the server has loaded it), or none with an open API. Stops when
/// `stop` is cancelled (so the next path can drop its database).
async fn serve_api(
    cfg: &EnqueueConfig,
    store: PgStore,
    stop: tokio_util::sync::CancellationToken,
) -> Result<(String, Option<String>), BenchError> {
    let bearer = if cfg.tokens {
        let (secret, sha) = courier_dispatch::auth::secret_new();
        let stores: Vec<String> = (0..cfg.stores).map(store_name).collect();
        let id = store
            .token_create("bench", false, &stores, &sha)
            .await
            .map_err(|e| BenchError::Task(format!("a bench token: {e}")))?;
        Some(format!(
            "Bearer {}",
            courier_dispatch::auth::token_text(id, &secret)
        ))
    } else {
        None
    };
    let auth = courier_dispatch::auth::Auth::start(store.clone(), None, !cfg.tokens);
    let app = courier_dispatch::server::router_with_auth(
        store,
        ServerConfig {
            limits: Limits::default(),
            webhook_secret: b"bench".to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: None,
            request_timeout: Duration::from_secs(30),
            provider_webhooks: Default::default(),
        },
        auth,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    });
    let base = format!("http://{addr}");
    token_loaded(&base, bearer.as_deref()).await?;
    Ok((base, bearer))
}

/// Waits (at most 5 s) until the server knows the bench's token.
async fn token_loaded(base: &str, bearer: Option<&str>) -> Result<(), BenchError> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut req = http.get(format!("{base}/v1/actions/0"));
        if let Some(b) = bearer {
            req = req.header("authorization", b);
        }
        let status = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
        if status == 404 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: "the server to load the bench's token".into(),
                limit: Duration::from_secs(5),
                detail: format!("last answer {status}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `failures` enqueues with a well-formed token whose secret is wrong (the
/// costliest failure: a lookup and a hash), from [`STORM_CLIENTS`] clients;
/// then `done` is cancelled.
async fn storm(
    base: String,
    failures: u32,
    done: tokio_util::sync::CancellationToken,
) -> Result<(), BenchError> {
    let _done = done.drop_guard();
    let (secret, _) = courier_dispatch::auth::secret_new();
    let bad = format!("Bearer {}", courier_dispatch::auth::token_text(1, &secret));
    let body = serde_json::json!({"store": store_name(0), "to": "+15551234567", "body": "x"});
    let each = failures.div_ceil(STORM_CLIENTS);
    let tasks: Vec<_> = (0..STORM_CLIENTS)
        .map(|_| {
            let (url, bad, body) = (format!("{base}/v1/actions"), bad.clone(), body.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for _ in 0..each {
                    let r = http
                        .post(&url)
                        .header("authorization", &bad)
                        .json(&body)
                        .send()
                        .await;
                    match r.map(|r| r.status().as_u16()) {
                        Ok(401) => {}
                        other => return Err(format!("a failed authentication answered {other:?}")),
                    }
                }
                Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await?.map_err(BenchError::Task)?;
    }
    Ok(())
}

fn store_name(i: u32) -> String {
    format!("store-{i:05}")
}

/// One closed-loop client.
struct Caller {
    path: Path,
    client: u32,
    per_call: u32,
    stores: u32,
    keyed: bool,
    rng: StdRng,
    store: PgStore,
    http: reqwest::Client,
    /// The API's base URL and the bearer header, on an HTTP path.
    api: Option<(String, Option<String>)>,
}

impl Caller {
    fn new(
        cfg: &EnqueueConfig,
        path: Path,
        client: u32,
        store: &PgStore,
        api: Option<(String, Option<String>)>,
    ) -> Self {
        Caller {
            path,
            client,
            per_call: if path.batched() { cfg.batch } else { 1 },
            stores: cfg.stores,
            keyed: cfg.keyed,
            rng: StdRng::seed_from_u64(cfg.seed ^ (u64::from(client) << 32)),
            store: store.clone(),
            http: reqwest::Client::new(),
            api,
        }
    }

    /// Calls until `deadline` or `stop`: the actions acknowledged, and
    /// each call's latency in microseconds.
    async fn run(
        mut self,
        deadline: Instant,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<(u64, Vec<u64>), BenchError> {
        let mut n = 0u64;
        let mut calls_us = Vec::new();
        while Instant::now() < deadline && !stop.is_cancelled() {
            let news: Vec<NewAction> = (0..self.per_call)
                .map(|i| self.action(n + u64::from(i)))
                .collect();
            let t = Instant::now();
            self.call(news).await?;
            calls_us.push(t.elapsed().as_micros() as u64);
            n += u64::from(self.per_call);
        }
        Ok((n, calls_us))
    }

    fn action(&mut self, n: u64) -> NewAction {
        let store = self.rng.random_range(0..self.stores);
        NewAction {
            store: store_name(store),
            to: format!("+1555{:07}", self.rng.random_range(0..10_000_000u32)),
            body: format!("bench message {n} of client {}", self.client),
            key: self.keyed.then(|| format!("c{}-{n}", self.client)),
            ..Default::default()
        }
    }

    async fn call(&self, news: Vec<NewAction>) -> Result<(), BenchError> {
        let fail = |e: String| BenchError::Task(format!("{}: {e}", self.path.name()));
        match self.path {
            Path::LibrarySingle => {
                self.store
                    .action_enqueue(&news[0])
                    .await
                    .map_err(|e| fail(e.to_string()))?;
            }
            Path::LibraryBatch => {
                self.store
                    .actions_enqueue_many(&news)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
            }
            Path::HttpSingle | Path::HttpSingleStorm => {
                self.post("/v1/actions", &news[0]).await.map_err(fail)?
            }
            Path::HttpBatch => {
                let body = serde_json::json!({ "actions": news });
                self.post("/v1/actions:batch", &body).await.map_err(fail)?
            }
        }
        Ok(())
    }

    async fn post(&self, route: &str, body: &impl Serialize) -> Result<(), String> {
        let (base, bearer) = self.api.as_ref().expect("an HTTP path has the API");
        let mut req = self.http.post(format!("{base}{route}")).json(body);
        if let Some(b) = bearer {
            req = req.header("authorization", b);
        }
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!(
                "{status}: {}",
                resp.text().await.unwrap_or_default()
            ));
        }
        Ok(())
    }
}
