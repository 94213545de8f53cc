//! The flow-control scenarios of `courier bench fairness`, each judged in
//! the run that measures it, its pacing counted from the provider's log:
//! - **a rate-limited store**: the first store is given a rate (5/s, burst
//!   5 by default) and sent a burst of actions at once beside the quiet
//!   stores' load. Its messages created per window, every window after the
//!   first, are judged against the rate within 10%; the quiet stores' p95
//!   against a paired baseline run, the same load with that store sending
//!   like every other one.
//! - **a provider's 429**: the fake's own rate limit below the offered
//!   load, courier's ceiling for the provider above it, every worker naming
//!   the provider's gate. The messages created a second over the steady
//!   part are judged against the fake's limit within 10%, and the
//!   verifier judges the log against the database (exactly once).
//!
//! Every run has a fresh database and a fake provider of its own, whose log
//! holds that run alone; both scenarios reuse the classic scenarios'
//! capacity (the calibration), workers, open-loop load and drain.
//!
//! # Invariants
//! - The two runs of a round send the quiet stores' same messages at the
//!   same instants; the limited store's actions are outside the quiet
//!   figures in both (it is the first store, a noisy one).
//! - A rate-limited run ends once every quiet action is accepted: the
//!   limited store's backlog is not waited for.
//! - A provider-429 run is judged once every action is done (its final
//!   status merged from the provider's webhooks), so the verifier compares
//!   every action's effects and outcome.

use super::pacing::{created_ms, per_window, send_lines};
use super::*;
use crate::harness::drain::{drain, Progress};
use courier_core::rate::{ProviderSettings, StoreSettings};
use courier_fake::SendRate;
use std::collections::HashSet;
use std::path::Path;
use tokio_util::sync::CancellationToken;

mod report;
pub use report::*;

/// The rate-limited store is the first store.
pub const LIMITED_STORE: u32 = 0;
/// The provider gate every worker names in the provider-429 run.
pub const GATE: &str = "fake";
/// Who the bench's settings changes are recorded as (`events`).
const BY: &str = "bench";

/// Which scenarios a fairness run runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Scenarios {
    /// Every store equal, one store noisy steadily, and in bursts: each with
    /// fair and with FIFO claiming.
    pub classic: bool,
    pub rate_limited_store: bool,
    pub provider_429: bool,
}

impl Scenarios {
    pub const CLASSIC: Scenarios = Scenarios {
        classic: true,
        rate_limited_store: false,
        provider_429: false,
    };
    pub const ALL: Scenarios = Scenarios {
        classic: true,
        rate_limited_store: true,
        provider_429: true,
    };

    /// Whether a flow scenario runs.
    pub fn flow(&self) -> bool {
        self.rate_limited_store || self.provider_429
    }
}

/// The flow scenarios' settings; checked by [`FlowConfig::validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct FlowConfig {
    /// The rate-limited store's rate (sends a second) and burst (its
    /// bucket's size).
    pub store_rate_per_s: f64,
    pub store_burst: u32,
    /// Actions enqueued at once for it as the load begins.
    pub store_burst_actions: u32,
    /// The pacing windows: each one's length, and how many the load lasts.
    pub window_s: u64,
    pub windows: u32,
    /// Rounds of the rate-limited scenario's pair (baseline, limited), in
    /// alternating order.
    pub rounds: u32,
    /// The fake's own rate limit, sends a second, and its burst (None:
    /// one second's worth).
    pub fake_limit_per_s: f64,
    pub fake_burst: Option<u32>,
    /// Courier's ceiling for the provider's gate, sends a second.
    pub ceiling_per_s: f64,
    /// Arrivals a second over every store in the provider-429 run, and how
    /// long they last.
    pub offered_per_s: f64,
    pub throttled_load_s: u64,
    /// The provider-429 run's seconds judged: from this many after its
    /// first message to the load's end.
    pub steady_from_s: u64,
}

impl FlowConfig {
    /// The full benchmark's settings: 60 s of pacing (300 sends at 5/s), a
    /// fake limited to 50/s under 100/s offered for 30 s.
    pub fn new() -> FlowConfig {
        FlowConfig {
            store_rate_per_s: 5.0,
            store_burst: 5,
            store_burst_actions: 1_000,
            window_s: 10,
            windows: 6,
            rounds: 1,
            fake_limit_per_s: 50.0,
            fake_burst: None,
            ceiling_per_s: 200.0,
            offered_per_s: 100.0,
            throttled_load_s: 30,
            steady_from_s: 5,
        }
    }

    /// Seconds, a tiny load: checks that everything runs, judges nothing.
    pub fn smoke() -> FlowConfig {
        FlowConfig {
            store_burst_actions: 100,
            window_s: 2,
            windows: 3,
            throttled_load_s: 3,
            steady_from_s: 1,
            ..FlowConfig::new()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        StoreSettings {
            rate_per_s: Some(self.store_rate_per_s),
            burst: Some(self.store_burst),
            in_flight_max: None,
        }
        .validate()
        .map_err(|e| format!("--store-rate or --store-burst: {e}"))?;
        self.fake_limit()
            .map_err(|e| format!("--fake-rate-limit or --fake-rate-burst: {e}"))?;
        ProviderSettings {
            rate_per_s: Some(self.ceiling_per_s),
            burst: None,
        }
        .validate()
        .map_err(|e| format!("--provider-ceiling: {e}"))?;
        if !(1..=1_000_000).contains(&self.store_burst_actions) {
            return Err("--store-burst-actions must be within 1..=1000000".into());
        }
        if !(1..=600).contains(&self.window_s) || !(2..=60).contains(&self.windows) {
            return Err("--window-s must be within 1..=600 and --windows within 2..=60".into());
        }
        if !(1..=20).contains(&self.rounds) {
            return Err("--flow-rounds must be within 1..=20".into());
        }
        let offered_ok = self.offered_per_s.is_finite()
            && self.offered_per_s > 0.0
            && self.offered_per_s <= 20_000.0;
        if !offered_ok {
            return Err("--offered-rate must be within (0, 20000]".into());
        }
        if !(1..=3600).contains(&self.throttled_load_s)
            || self.steady_from_s >= self.throttled_load_s
        {
            return Err(
                "--throttled-load-s must be within 1..=3600 and longer than its unjudged start"
                    .into(),
            );
        }
        Ok(())
    }

    /// The fake's rate limit and its burst.
    pub fn fake_limit(&self) -> Result<(SendRate, u32), String> {
        let rate = SendRate::per_s(self.fake_limit_per_s)?;
        let burst = self.fake_burst.unwrap_or_else(|| rate.default_burst());
        if burst == 0 {
            return Err("a burst must be at least 1".into());
        }
        Ok((rate, burst))
    }

    /// How long a rate-limited run's load lasts: its windows, and 2 s for
    /// the last window to close after a first message that follows the
    /// burst's enqueue.
    pub fn paced_load_s(&self) -> u64 {
        self.window_s * u64::from(self.windows) + 2
    }
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig::new()
    }
}

/// Runs the flow scenarios the run asks for, with capacity `c`; None
/// when it asks for none.
pub(super) async fn flow_runs(
    ctx: &Ctx<'_>,
    c: Calibration,
) -> Result<Option<FlowReport>, BenchError> {
    let s = ctx.cfg.scenarios;
    if !s.flow() {
        return Ok(None);
    }
    let load_before = crate::cpu::load_average_1m();
    let rate_limited = if s.rate_limited_store {
        Some(rate_limited_store(ctx, c).await?)
    } else {
        None
    };
    let provider_429 = if s.provider_429 {
        Some(provider_throttled(ctx, c).await?)
    } else {
        None
    };
    Ok(Some(FlowReport {
        load_average_1m: (load_before, crate::cpu::load_average_1m()),
        rate_limited,
        provider_429,
    }))
}

/// The rate-limited scenario: per round, a baseline run and a run with the
/// limited store, in alternating order.
async fn rate_limited_store(ctx: &Ctx<'_>, c: Calibration) -> Result<RateLimitedStore, BenchError> {
    let cfg = ctx.cfg;
    let f = &cfg.flow;
    let plan = Plan::new(cfg, c, f.paced_load_s())?;
    let mut rounds = Vec::new();
    for round in 0..f.rounds {
        let seed = flow_seed(cfg.seed, round);
        let schedule = flow_schedule(cfg, plan.duration_s, cfg.rate_per_store_hz, seed);
        let limited: Vec<Arrival> = schedule
            .iter()
            .filter(|a| a.store != LIMITED_STORE)
            .copied()
            .collect();
        let run = |is_limited: bool| {
            let what = if is_limited { "limited" } else { "baseline" };
            let title = format!("[flow round {}/{}] {what}", round + 1, f.rounds);
            let log = ctx.dir.join(format!("flow-{round}-{what}.jsonl"));
            let schedule = if is_limited { &limited } else { &schedule };
            let plan = &plan;
            async move { paced_run(ctx, plan, schedule, is_limited, &log, &title).await }
        };
        // Alternating order: a drift of the machine weighs on both alike.
        let (base, paced) = if round % 2 == 0 {
            let b = run(false).await?;
            (b, run(true).await?)
        } else {
            let p = run(true).await?;
            (run(false).await?, p)
        };
        rounds.push(PairedRound {
            baseline_quiet_us: base.quiet_us,
            limited_quiet_us: paced.quiet_us,
            windows: paced.windows,
        });
    }
    rate_limited_figures(cfg, rounds)
}

/// What one run of the rate-limited scenario's pair measured.
struct PacedSamples {
    /// The quiet stores' latencies after the warm-up, in microseconds.
    quiet_us: Vec<u64>,
    /// The limited store's messages created in each window from its first
    /// (empty in a baseline run).
    windows: Vec<u64>,
}

/// One run of the pair: the limited store given its rate and sent its
/// burst when `limited`, the quiet load, then a wait for the quiet
/// stores' actions only.
async fn paced_run(
    ctx: &Ctx<'_>,
    plan: &Plan,
    schedule: &[Arrival],
    limited: bool,
    log: &Path,
    title: &str,
) -> Result<PacedSamples, BenchError> {
    let cfg = ctx.cfg;
    let (url, store) = fresh_database(ctx).await?;
    let name = store_name(LIMITED_STORE);
    if limited {
        let settings = StoreSettings {
            rate_per_s: Some(cfg.flow.store_rate_per_s),
            burst: Some(cfg.flow.store_burst),
            in_flight_max: None,
        };
        store
            .store_configure(&name, &settings, BY)
            .await
            .map_err(|e| BenchError::Settings(format!("store {name}: {e}")))?;
    }
    let fake = courier_fake::start(fake_config(cfg, log)).await?;
    let wiring = Wiring::plain(&fake.url());
    let mut pool = start_workers(ctx, plan, ClaimMode::Fair, &url, &wiring).await?;
    let bar = run_bar(cfg, plan, title);
    let ran = async {
        let ids = if limited {
            enqueue_burst(&store, &name, cfg.flow.store_burst_actions).await?
        } else {
            Vec::new()
        };
        load(ctx, plan, &store, schedule, &pool, &bar).await?;
        let excluded = limited.then_some(name.as_str());
        quiet_drained(cfg, &store, schedule, excluded, &bar, title).await?;
        Ok::<_, BenchError>(ids)
    }
    .await;
    pool.stop().await?;
    fake.shutdown().await?;
    bar.finish_with_message(format!("done · accepted {}", pool.settled()));
    let ids = ran?;
    let rows = store.latencies_enqueue_to_accepted().await?;
    let windows = if limited {
        limited_windows(&store, &ids, log, &cfg.flow).await?
    } else {
        Vec::new()
    };
    Ok(PacedSamples {
        quiet_us: split(cfg, &rows).quiet_us,
        windows,
    })
}

/// The provider-429 scenario: the fake's limit, courier's ceiling and the
/// webhook API, the load, every action done, then the log's figures and
/// the verifier's report.
async fn provider_throttled(
    ctx: &Ctx<'_>,
    c: Calibration,
) -> Result<ProviderThrottled, BenchError> {
    let cfg = ctx.cfg;
    let f = &cfg.flow;
    let plan = Plan::new(cfg, c, f.throttled_load_s)?;
    let rate = f.offered_per_s / f64::from(cfg.stores);
    let schedule = flow_schedule(cfg, plan.duration_s, rate, flow_seed(cfg.seed, u32::MAX));
    let (url, store) = fresh_database(ctx).await?;
    let ceiling = ProviderSettings {
        rate_per_s: Some(f.ceiling_per_s),
        burst: None,
    };
    store
        .provider_configure(GATE, &ceiling, BY)
        .await
        .map_err(|e| BenchError::Settings(format!("provider {GATE}: {e}")))?;
    let shutdown = CancellationToken::new();
    let (api, server) = webhook_api(&url, &plan.limits, &shutdown).await?;
    let log = ctx.dir.join("flow-provider-429.jsonl");
    let (limit, burst) = f.fake_limit().map_err(BenchError::Settings)?;
    let mut fake = fake_config(cfg, &log);
    (fake.rate_limit, fake.rate_burst) = (Some(limit), Some(burst));
    let fake = courier_fake::start(fake).await?;
    let wiring = Wiring {
        provider_url: fake.url(),
        status_callback: Some(format!("{api}/v1/webhooks/provider")),
        provider_gate: Some(GATE.to_string()),
    };
    let ran = throttled_load(ctx, &plan, &url, &store, &schedule, &wiring).await;
    fake.shutdown().await?;
    shutdown.cancel();
    server
        .await?
        .map_err(|e| BenchError::Task(format!("webhook server: {e}")))?;
    ran?;
    let verifier = courier_rig::judge::verify_against(&store, &log)
        .await
        .map_err(|e| BenchError::Task(format!("the verifier: {e}")))?;
    let lines = send_lines(&std::fs::read_to_string(&log)?);
    let actions = schedule.iter().map(|a| u64::from(a.count)).sum();
    Ok(throttled_figures(f, burst, actions, &lines, verifier))
}

/// The provider-429 run's workers, load and wait until every action is
/// done.
async fn throttled_load(
    ctx: &Ctx<'_>,
    plan: &Plan,
    url: &str,
    store: &PgStore,
    schedule: &[Arrival],
    wiring: &Wiring,
) -> Result<(), BenchError> {
    let title = "[flow] provider 429";
    let mut pool = start_workers(ctx, plan, ClaimMode::Fair, url, wiring).await?;
    let bar = run_bar(ctx.cfg, plan, title);
    let ran = async {
        load(ctx, plan, store, schedule, &pool, &bar).await?;
        let limit = Duration::from_secs(ctx.cfg.drain_timeout_s);
        let what = format!("every action of {title} done");
        drain(&what, limit, Duration::from_millis(250), async || {
            let p = store.actions_progress().await?;
            bar.set_message(format!("draining: {} of {} done", p.done, p.total));
            let count = |n: i64| u64::try_from(n).unwrap_or(0);
            Ok(Progress {
                done: count(p.done),
                total: count(p.total),
            })
        })
        .await?;
        Ok::<_, BenchError>(())
    }
    .await;
    pool.stop().await?;
    bar.finish_with_message(format!("done · accepted {}", pool.settled()));
    ran
}

/// A round's seed for the flow scenarios, apart from the classic rounds'.
fn flow_seed(seed: u64, round: u32) -> u64 {
    seed.wrapping_add((0xf10 + u64::from(round)).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Every store's Poisson arrivals at `rate_per_store_hz` for `duration_s`
/// (the baseline's shape), each message stating its provider latency.
fn flow_schedule(
    cfg: &FairnessConfig,
    duration_s: u64,
    rate_per_store_hz: f64,
    seed: u64,
) -> Vec<Arrival> {
    let shape = Shape {
        rate_per_store_hz,
        duration_ms: duration_s as f64 * 1000.0,
        ..cfg.shape()
    };
    let mut schedule = arrivals(&shape, Scenario::Baseline, seed);
    spread_latencies(&mut schedule, cfg.noisy_stores, &cfg.latency, seed);
    schedule
}

/// A fresh database for one run, and a store on it.
async fn fresh_database(ctx: &Ctx<'_>) -> Result<(String, PgStore), BenchError> {
    let url = courier_store::database_recreate(&ctx.server_url, DATABASE).await?;
    let mut sc = StoreConfig::new(&url);
    sc.pool_size_max = 16;
    let store = PgStore::connect(&sc).await?;
    Ok((url, store))
}

/// A run's progress bar over its load's seconds.
fn run_bar(cfg: &FairnessConfig, plan: &Plan, title: &str) -> indicatif::ProgressBar {
    let b = bar(
        cfg.progress,
        plan.duration_s,
        "{prefix} [{bar:30}] {pos}/{len} s {msg}",
    );
    b.set_prefix(title.to_string());
    b
}

/// Enqueues `n` actions for store `name` at once; answers their ids.
async fn enqueue_burst(store: &PgStore, name: &str, n: u32) -> Result<Vec<i64>, BenchError> {
    let news: Vec<NewAction> = (0..n)
        .map(|i| NewAction {
            store: name.to_string(),
            to: "+15550000000".into(),
            body: format!("bench burst message {i}"),
            key: None,
            ..Default::default()
        })
        .collect();
    let mut ids = Vec::with_capacity(news.len());
    for chunk in news.chunks(courier_core::ENQUEUE_MANY_MAX as usize) {
        let made = store
            .actions_enqueue_many(chunk)
            .await
            .map_err(|e| match e {
                courier_store::EnqueueError::Store(s) => BenchError::Store(s),
                other => BenchError::Task(other.to_string()),
            })?;
        ids.extend(made.into_iter().map(|e| e.id()));
    }
    Ok(ids)
}

/// Waits until every action of `schedule` is accepted, the actions of store
/// `excluded` not counted, within the run's drain time-out.
async fn quiet_drained(
    cfg: &FairnessConfig,
    store: &PgStore,
    schedule: &[Arrival],
    excluded: Option<&str>,
    bar: &indicatif::ProgressBar,
    title: &str,
) -> Result<(), BenchError> {
    let total: u64 = schedule.iter().map(|a| u64::from(a.count)).sum();
    let what = format!("the quiet stores' actions of {title}");
    let limit = Duration::from_secs(cfg.drain_timeout_s);
    drain(&what, limit, Duration::from_millis(250), async || {
        let rows = store.latencies_enqueue_to_accepted().await?;
        let done = rows
            .iter()
            .filter(|r| Some(r.store.as_str()) != excluded)
            .count() as u64;
        bar.set_message(format!("draining: {done} of {total} accepted"));
        Ok(Progress { done, total })
    })
    .await?;
    Ok(())
}

/// The limited store's messages created per window, from the provider's
/// log; its keys are those of the actions `ids` (from the database).
async fn limited_windows(
    store: &PgStore,
    ids: &[i64],
    log: &Path,
    f: &FlowConfig,
) -> Result<Vec<u64>, BenchError> {
    let ids: HashSet<i64> = ids.iter().copied().collect();
    let keys: HashSet<String> = store
        .action_outcomes()
        .await?
        .into_iter()
        .filter(|o| ids.contains(&o.action_id))
        .map(|o| courier_core::action_key(&o.uid))
        .collect();
    let lines = send_lines(&std::fs::read_to_string(log)?);
    let times = created_ms(&lines, |k| keys.contains(k));
    let origin = times.first().copied().unwrap_or(0);
    let window_ms = i64::try_from(f.window_s * 1000).unwrap_or(i64::MAX);
    Ok(per_window(&times, origin, window_ms, f.windows as usize))
}

/// The webhook API in-process on a loopback port until `shutdown`: its URL
/// and its task.
async fn webhook_api(
    url: &str,
    limits: &Limits,
    shutdown: &CancellationToken,
) -> Result<(String, tokio::task::JoinHandle<std::io::Result<()>>), BenchError> {
    let mut sc = StoreConfig::new(url);
    sc.migrate = false;
    sc.pool_size_max = 8;
    let app = courier_dispatch::server::router(
        PgStore::connect(&sc).await?,
        courier_dispatch::server::ServerConfig {
            limits: limits.clone(),
            webhook_secret: SECRET.as_bytes().to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: None,
            request_timeout: Duration::from_secs(30),
            provider_webhooks: Default::default(),
        },
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let api = format!("http://{}", listener.local_addr()?);
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });
    Ok((api, server))
}
