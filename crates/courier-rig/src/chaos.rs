//! The chaos run: real processes under faults, judged by the provider's log.
//!
//! [`Chaos::start`] starts the database (a throwaway cluster unless another
//! is named), the server, the flaky provider (unless an external one is
//! given) and the workers. [`Chaos::run`] enqueues actions at a steady rate
//! over the span (one store noisier than the rest) and, while they are
//! worked, applies the [`FaultPlan`]: SIGKILLs of random workers (each death
//! confirmed from the wait status, each replaced), PostgreSQL crash-restarts,
//! and freezes of the worker holding the most actions for longer than its
//! lease. Then it stops everything and verifies the provider's log
//! ([`judge::verify_against`]).
//!
//! A share of the actions is scheduled, a share expiring, and a share
//! cancelled shortly after its enqueue ([`IntentMix`]); the verdict's rows
//! of cancelled actions with an effect and of sends outside an action's
//! `not_before`/`expires_at` are then about real traffic, and the report
//! counts what the load asked and what the courier ended
//! ([`IntentDone`]).
//!
//! With a failover spec (`courier chaos --failover`) the database is a
//! local HA cluster ([`crate::ha`]: 3 etcd members, Patroni with a primary
//! and two standbys) reached through its multi-host URL, and the plan adds
//! its faults ([`crate::failover`]): node deaths, pauses, switchovers and
//! postmaster kills. The verdict then adds two rows: acknowledged enqueues
//! (the load's client-side history) missing from the final primary, and
//! actions whose status went backwards across a failover.
//!
//! Everything random comes from the seed, drawn in a fixed order: the first
//! workers' seeds, the load's seed, the plan (the failovers' order last),
//! then each kill's victim and its replacement's seed.

use crate::database::{Database, DatabaseSpec};
use crate::failover::{self, FailoverDone};
use crate::fleet::{spawn_service, Fleet, Proc};
use crate::flow::{self, FlowDone, FlowSpec};
use crate::ha::{HaCluster, HaSettings};
use crate::load::{IntentCounts, IntentMix, IntentSnapshot, Load};
use crate::plan::{FailoverCounts, FaultCounts, FaultKind, FaultPlan, Planned};
use crate::progress::{status_line, Bars};
use crate::spec::{
    chaos_limits, chaos_retention, FakeModes, FakeSpec, NamedProvider, ProviderTarget, ServerSpec,
    UnsafeResend, WorkerSpec,
};
use crate::{judge, load, RigError};
use courier_core::{Limits, Tier};
use courier_providers::Named;
use courier_store::{PgStore, StoreConfig, Summary};
use courier_verify::Report;
use indicatif::{MultiProgress, ProgressBar};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const API_KEY: &str = "chaos-api-key";
pub const SECRET: &str = "chaos-webhook-secret";
/// How often a failover run asks Patroni whether the cluster is healthy.
const HEALTH_EVERY_MS: u64 = 500;
/// The lag of the fake's lookups in a tier-b run, and the lag the workers
/// are told (`Limits::lookup_lag_ms`; every tier's workers get it, so that
/// a negative control differs from its run in the tier alone). Longer than
/// a chaos worker's request time-out (half its lease), so that a "not
/// found" trusted at once, after a send whose answer was lost, can miss the
/// message that send created.
pub const CHAOS_LOOKUP_LAG_MS: u64 = 3_000;

/// A provider the chaos run did not start (any implementation of the contract).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalProvider {
    pub url: String,
    /// Its log, read after the run.
    pub log: PathBuf,
    pub api_key: String,
    pub webhook_secret: String,
}

/// What the chaos run does.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosConfig {
    pub seed: u64,
    pub actions: usize,
    pub stores: usize,
    pub workers: usize,
    pub faults: FaultCounts,
    /// How much more the noisy store sends than each other store.
    pub noisy_factor: usize,
    /// Actions each worker works on at once.
    pub concurrency: u32,
    pub lease_ttl_ms: u64,
    /// Actions arrive, and faults land, spread over this many seconds.
    pub duration_s: u64,
    /// DEMONSTRATION ONLY: broken workers, for a negative control (always
    /// `None` without the `negative-controls` feature).
    pub unsafe_resend: Option<UnsafeResend>,
    /// DEMONSTRATION ONLY: workers that ignore every action's `expires_at`
    /// (`courier worker --unsafe-ignore-expiry`), for the negative control
    /// of the expiry; refused without the `negative-controls` feature.
    pub unsafe_ignore_expiry: bool,
    /// The shares of scheduled, expiring and cancelled actions.
    pub intent: IntentMix,
    /// The provider's guarantee tier: the fake behaves as a provider of
    /// that tier (`FakeSpec::for_tier`), the workers decide by it, and the
    /// verdict holds the run to its promise (`Tier::promise`).
    pub tier: Tier,
    /// A named provider (`courier_providers::Named`) instead of the
    /// contract's: the fake runs as its double (`--dialect`, with the modes
    /// of its tier), the workers send through its adapter and the server
    /// checks its webhooks with its scheme, all with one credentials file
    /// written in the run directory. `tier` must be one it allows.
    pub named: Option<Named>,
    /// DEMONSTRATION ONLY: the workers decide by this tier instead of
    /// `tier` (a tier-c worker that resends, a tier-b worker that trusts a
    /// "not found" at once), while the provider and the verdict stay at
    /// `tier`: the negative controls of the tiers. Refused without the
    /// `negative-controls` feature.
    pub unsafe_worker_tier: Option<Tier>,
    /// `None`: the run starts the fake provider.
    pub provider: Option<ExternalProvider>,
    pub database: DatabaseSpec,
    /// Give up after this long.
    pub timeout_s: u64,
    /// Give up when no action became final for this long (after the span).
    pub stall_s: u64,
    /// Run on a local HA cluster and fail it over (`--failover`).
    pub failover: Option<FailoverSpec>,
    /// Rated stores, the fake's own rate limit ([`crate::flow`]).
    pub flow: FlowSpec,
    /// The fake provider runs without faults (`courier provider
    /// --no-faults`): with no faults planned either, the run's pacing and
    /// pauses are judged, not only reported ([`FlowDone::judged`]).
    pub provider_faults_off: bool,
}

/// The HA cluster of a failover run and what is done to it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailoverSpec {
    pub settings: HaSettings,
    pub counts: FailoverCounts,
}

impl FailoverSpec {
    /// The proof: synchronous, one of each kind and a postmaster kill.
    pub fn proof() -> Self {
        FailoverSpec {
            settings: HaSettings::synchronous(),
            counts: FailoverCounts {
                node_deaths: 1,
                postmaster_kills: 1,
                pauses: 1,
                switchovers: 1,
                lossy_deaths: 0,
            },
        }
    }

    /// The negative control: asynchronous, one failover that loses the
    /// tail of the WAL.
    pub fn control() -> Self {
        FailoverSpec {
            settings: HaSettings::asynchronous(),
            counts: FailoverCounts {
                lossy_deaths: 1,
                ..FailoverCounts::default()
            },
        }
    }
}

impl ChaosConfig {
    /// The defaults of `courier chaos`.
    pub fn new(seed: u64) -> Self {
        ChaosConfig {
            seed,
            actions: 2000,
            stores: 100,
            workers: 4,
            faults: FaultCounts {
                kills: 200,
                pg_restarts: 1,
                freezes: 5,
            },
            noisy_factor: 10,
            concurrency: 16,
            lease_ttl_ms: 2_000,
            duration_s: 60,
            unsafe_resend: None,
            unsafe_ignore_expiry: false,
            intent: IntentMix::chaos(),
            tier: Tier::A,
            named: None,
            unsafe_worker_tier: None,
            provider: None,
            database: DatabaseSpec::Throwaway,
            timeout_s: 900,
            stall_s: 120,
            failover: None,
            flow: FlowSpec::default(),
            provider_faults_off: false,
        }
    }

    pub fn validate(&self) -> Result<(), RigError> {
        let bad = |m: &str| Err(RigError::Settings(m.to_string()));
        if self.workers == 0 {
            return bad("workers must be at least 1");
        }
        if self.stores == 0 || self.noisy_factor == 0 {
            return bad("stores and noisy_factor must be at least 1");
        }
        if self.unsafe_ignore_expiry && !cfg!(feature = "negative-controls") {
            return bad("unsafe_ignore_expiry needs a build with the negative-controls feature");
        }
        if self.flow.unshared_gates && !cfg!(feature = "negative-controls") {
            return bad("unshared provider gates need a build with the negative-controls feature");
        }
        if self.flow.rated_stores > self.stores {
            return bad("rated_stores must not be more than the stores");
        }
        if (self.flow.fake_rate_limit.is_some() || self.provider_faults_off)
            && self.provider.is_some()
        {
            return bad("the fake's rate limit and faults are the run's own fake provider's");
        }
        if self.unsafe_worker_tier.is_some() && !cfg!(feature = "negative-controls") {
            return bad("unsafe_worker_tier needs a build with the negative-controls feature");
        }
        if self.tier != Tier::A && self.provider.is_some() {
            return bad("a tier other than a needs the run's own fake provider, set to that tier");
        }
        if let Some(n) = self.named {
            if self.provider.is_some() {
                return bad(
                    "a named provider runs against the run's own double, not an external provider",
                );
            }
            let offers = n.double_tier();
            if !self.tier.runs_on(offers) {
                return Err(RigError::Settings(format!(
                    "{n} offers tier {offers}: a run at tier {} would promise more than it allows",
                    self.tier
                )));
            }
        }
        self.intent
            .validate()
            .map_err(|e| RigError::Settings(format!("intent mix: {e}")))?;
        if self.faults.pg_restarts > 0 && self.database != DatabaseSpec::Throwaway {
            return bad("PostgreSQL restarts need the run's own cluster (no database URL)");
        }
        if let Some(f) = &self.failover {
            if self.database != DatabaseSpec::Throwaway || self.faults.pg_restarts > 0 {
                return bad(
                    "a failover run starts its own HA cluster: no database URL, no pg_restarts",
                );
            }
            f.settings.validate().map_err(RigError::Settings)?;
        }
        chaos_limits(self.lease_ttl_ms, self.concurrency)
            .validate()
            .map_err(|e| RigError::Settings(format!("worker limits: {e}")))
    }

    fn span(&self) -> Duration {
        Duration::from_secs(self.duration_s.max(1))
    }

    /// A run whose final count stops moving is stalled (a broken worker's
    /// actions may never settle): it gives up after this long without progress.
    fn stall(&self) -> Duration {
        match self.unsafe_resend {
            Some(_) => Duration::from_secs(self.stall_s.min(10)),
            None => Duration::from_secs(self.stall_s),
        }
    }
}

/// What was done to the system, and what it absorbed.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Done {
    pub kills_sent: usize,
    pub kills_confirmed: usize,
    pub pg_restarts: usize,
    pub freezes: usize,
    pub fenced_writes_refused: i64,
    pub lookups: u64,
    pub resends: u64,
    pub timeouts_seen: i64,
    pub duplicate_webhooks_absorbed: i64,
    pub backward_reports_ignored: i64,
    pub reclaims: i64,
    /// The HA cluster's faults and rows (a failover run only).
    pub failover: Option<FailoverDone>,
    /// What the load asked about time and intent, and how the actions ended.
    pub intent: IntentDone,
    /// Actions the courier held `unknown` (its provider's tier could not
    /// tell whether an attempt went out).
    pub held_unknown: i64,
    /// What the provider's log shows of flow control (a run with rated
    /// stores or a rate-limited fake only).
    pub flow: Option<FlowDone>,
}

/// The time and intent of a run: what the load asked
/// ([`IntentSnapshot`]), and how many actions the courier ended expired
/// or cancelled.
#[derive(Debug, Default, Clone, Serialize)]
pub struct IntentDone {
    #[serde(flatten)]
    pub asked: IntentSnapshot,
    /// Actions the courier ended `expired`.
    pub expired: i64,
    /// Actions the courier ended `cancelled`.
    pub cancelled: i64,
}

/// The JSON report of a run (`courier chaos --report`).
#[derive(Serialize)]
struct ChaosReport<'a> {
    seed: u64,
    passed: bool,
    wall_time_s: f64,
    actions: usize,
    stores: usize,
    workers: usize,
    unsafe_resend: Option<UnsafeResend>,
    unsafe_ignore_expiry: bool,
    tier: Tier,
    named: Option<Named>,
    unsafe_worker_tier: Option<Tier>,
    intent: IntentMix,
    done: &'a Done,
    verify: serde_json::Value,
}

/// The chaos run's system, started.
pub struct Chaos {
    cfg: ChaosConfig,
    dir: PathBuf,
    db: Database,
    /// The HA cluster of a failover run.
    ha: Option<HaCluster>,
    store: PgStore,
    server: Proc,
    provider: Option<Proc>,
    api: String,
    provider_url: String,
    log: PathBuf,
    fleet: Fleet,
    rng: StdRng,
    load_seed: u64,
    plan: FaultPlan,
    started: Instant,
}

/// The provider of a run: the one it starts, or the external one.
struct ProviderUp {
    proc: Option<Proc>,
    url: String,
    log: PathBuf,
    api_key: String,
}

impl Chaos {
    /// Starts everything in a new run directory (`exe` is the courier binary).
    pub async fn start(exe: &Path, cfg: ChaosConfig) -> Result<Chaos, RigError> {
        cfg.validate()?;
        let started = Instant::now();
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        // Kept when anything fails, for the post-mortem (see `ChaosOutcome::close`).
        let dir = tempfile::Builder::new()
            .prefix("courier-chaos-")
            .tempdir()
            .map_err(|e| RigError::io(std::env::temp_dir(), e))?
            .keep();
        // PostgreSQL runs as `postgres` when we are root: it must reach the cluster.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| RigError::io(&dir, e))?;
        let (ha, db) = start_database(&cfg, &dir).await?;
        let store = PgStore::connect(&StoreConfig::new(db.url())).await?;
        cfg.flow.apply(&store).await?;
        let secret = cfg
            .provider
            .as_ref()
            .map_or(SECRET, |p| p.webhook_secret.as_str());
        let named = write_credentials(&cfg, &dir, secret)?;
        let server = ServerSpec {
            database_url: db.url().to_string(),
            listen: "127.0.0.1:0".into(),
            webhook_secret: secret.to_string(),
            named: named.clone(),
        };
        let (server, api) =
            spawn_service(exe, "server", &server.args(), &dir.join("server.log")).await?;
        let provider = start_provider(exe, &cfg, &dir, secret).await?;
        let worker = WorkerSpec {
            database_url: db.url().to_string(),
            provider: ProviderTarget {
                url: provider.url.clone(),
                api_key: provider.api_key.clone(),
                callback_url: Some(format!(
                    "{api}/v1/webhooks/{}",
                    cfg.named.map_or("provider", Named::as_str)
                )),
            },
            named,
            limits: Limits {
                lookup_lag_ms: CHAOS_LOOKUP_LAG_MS,
                ..chaos_limits(cfg.lease_ttl_ms, cfg.concurrency)
            },
            retention: chaos_retention(),
            tier: cfg.unsafe_worker_tier.unwrap_or(cfg.tier),
            unsafe_resend: cfg.unsafe_resend,
            unsafe_ignore_expiry: cfg.unsafe_ignore_expiry,
            unshared_gate: cfg.flow.unshared_gates,
        };
        let seeds: Vec<u64> = (0..cfg.workers).map(|_| rng.random()).collect();
        let fleet = Fleet::start(exe, worker, &dir, seeds)?;
        let load_seed = rng.random();
        let mut plan = FaultPlan::draw(&mut rng, &cfg.faults, cfg.span());
        if let Some(f) = &cfg.failover {
            plan = plan.with_failovers(&mut rng, &f.counts, cfg.span());
        }
        Ok(Chaos {
            dir,
            db,
            ha,
            store,
            server,
            provider: provider.proc,
            api,
            provider_url: provider.url,
            log: provider.log,
            fleet,
            rng,
            load_seed,
            plan,
            started,
            cfg,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn api(&self) -> &str {
        &self.api
    }

    pub fn provider_url(&self) -> &str {
        &self.provider_url
    }

    /// Enqueues and applies the fault plan while the actions are worked,
    /// until every action is final and the plan is done (or the time is up,
    /// or the run stalls); then stops the processes and judges.
    pub async fn run(mut self) -> Result<ChaosOutcome, RigError> {
        let cfg = self.cfg.clone();
        let counts = Arc::new(IntentCounts::default());
        let shape = Load {
            actions: cfg.actions,
            stores: cfg.stores,
            noisy_factor: cfg.noisy_factor,
            span: cfg.span(),
            seed: self.load_seed,
        };
        let enqueue = tokio::spawn(load::enqueue_weighted(
            load::client(&self.api)?,
            shape,
            cfg.intent,
            counts.clone(),
        ));
        let mut live = Live::new(&cfg, std::mem::take(&mut self.plan.faults), counts.clone());
        if let Some(f) = &cfg.failover {
            live.done.failover = Some(FailoverDone::planned(&f.counts));
        }
        let finished = self.drive(&mut live).await?;
        if let (Some(since), Some(f)) = (live.unhealthy_since.take(), live.done.failover.as_mut()) {
            f.unhealthy(since.elapsed());
        }
        let acked = enqueue.await??;
        tracing::debug!(
            freeze_misses = live.freeze_misses,
            "chaos: freezes retried while no worker held actions"
        );
        live.bars.finish();
        live.faults_bar.finish();
        let wall = self.started.elapsed();
        self.fleet.stop(Duration::from_secs(10)).await?;
        self.server.stop(Duration::from_secs(5)).await?;
        if let Some(p) = self.provider {
            p.stop(Duration::from_secs(5)).await?;
        }
        let promise = judge::promise_of(cfg.tier);
        let report = judge::verify_against_under(&self.store, &self.log, promise).await?;
        let s = self.store.summary(1800).await?;
        let mut done = absorbed(live.done, &s, &report, judge::resends(&self.log)?);
        done.intent = IntentDone {
            asked: counts.snapshot(),
            expired: s.state("expired"),
            cancelled: s.state("cancelled"),
        };
        done.held_unknown = s.state("unknown");
        if cfg.flow != FlowSpec::default() {
            // The fake's Retry-After: whole seconds, 1 at any limit of at
            // least one send a second.
            let mut flow = flow::done(&cfg.flow, &self.store, &self.log, 1_000).await?;
            flow.judged = cfg.provider_faults_off
                && cfg.faults == FaultCounts::default()
                && cfg.failover.is_none();
            done.flow = Some(flow);
        }
        let flow_ok = done.flow.as_ref().is_none_or(|f| !f.judged || f.passed());
        if let Some(f) = done.failover.as_mut() {
            f.acked = acked.len();
            f.acked_missing = failover::acked_missing(&self.store, &acked).await?;
        }
        let failover_ok = done.failover.as_ref().is_none_or(failover_passed);
        Ok(ChaosOutcome {
            passed: finished && report.passed() && failover_ok && flow_ok,
            finished,
            wall,
            report,
            done,
            cfg,
            dir: self.dir,
            db: self.db,
            ha: self.ha,
        })
    }
}

/// Every failover row is 0 and every kind the proof needs was done (the
/// negative control, whose only failover is its lossy one, fails here).
pub fn failover_passed(f: &FailoverDone) -> bool {
    f.acked_missing == 0
        && f.went_backwards == 0
        && f.woken_writes == 0
        && f.kinds_missing().is_empty()
}

/// The run's database: a throwaway cluster, a URL, or (a failover run) a
/// new HA cluster under `dir/ha`, reached through its multi-host URL.
async fn start_database(
    cfg: &ChaosConfig,
    dir: &Path,
) -> Result<(Option<HaCluster>, Database), RigError> {
    let Some(f) = &cfg.failover else {
        return Ok((None, Database::start(&cfg.database, dir).await?));
    };
    let ha = HaCluster::up(&dir.join("ha"), f.settings, false).await?;
    let url = ha.url();
    let db = Database::start(&DatabaseSpec::External { url }, dir).await?;
    Ok((Some(ha), db))
}

async fn start_provider(
    exe: &Path,
    cfg: &ChaosConfig,
    dir: &Path,
    secret: &str,
) -> Result<ProviderUp, RigError> {
    if let Some(p) = &cfg.provider {
        return Ok(ProviderUp {
            proc: None,
            url: p.url.clone(),
            log: p.log.clone(),
            api_key: p.api_key.clone(),
        });
    }
    let log = dir.join("provider.jsonl");
    let fake = FakeSpec {
        listen: "127.0.0.1:0".into(),
        log: log.clone(),
        api_key: API_KEY.into(),
        webhook_secret: secret.to_string(),
        seed: cfg.seed,
        modes: FakeModes {
            faults_off: cfg.provider_faults_off,
            rate_limit: cfg.flow.fake_rate_limit,
            ..match cfg.named {
                // The double leaves out what the named provider lacks.
                Some(n) => FakeModes::for_tier(n.double_tier(), 0),
                None => FakeModes::for_tier(cfg.tier, CHAOS_LOOKUP_LAG_MS),
            }
        },
        dialect: cfg.named.map_or("contract", Named::as_str).to_string(),
    };
    let (proc, url) =
        spawn_service(exe, "provider", &fake.args(), &dir.join("provider.log")).await?;
    Ok(ProviderUp {
        proc: Some(proc),
        url,
        log,
        api_key: API_KEY.into(),
    })
}

/// The named provider's credentials file (the settings its double
/// expects), in the run directory; `None` for the contract's provider.
fn write_credentials(
    cfg: &ChaosConfig,
    dir: &Path,
    secret: &str,
) -> Result<Option<NamedProvider>, RigError> {
    let Some(n) = cfg.named else {
        return Ok(None);
    };
    let path = dir.join(format!("{n}.credentials"));
    let text: String = n
        .double_settings(API_KEY, secret)
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    std::fs::write(&path, text).map_err(|e| RigError::io(&path, e))?;
    Ok(Some(NamedProvider {
        name: n.as_str().to_string(),
        credentials_file: path,
    }))
}

/// What the database and the log say the run absorbed.
fn absorbed(mut done: Done, s: &Summary, report: &Report, resends: u64) -> Done {
    done.fenced_writes_refused = s.event("fenced");
    done.timeouts_seen = s.event("send_unknown");
    done.duplicate_webhooks_absorbed = s.event("duplicate_webhook");
    done.backward_reports_ignored = s.event("backward");
    done.lookups = report.stats.lookup_lines;
    done.resends = resends;
    done.reclaims = s.event("reclaimed");
    done
}

/// Where a run stands while it is driven.
struct Live {
    t0: Instant,
    span: Duration,
    deadline: Instant,
    stall: Duration,
    /// Actions the load enqueues (some may be refused as already expired:
    /// `intent` counts them).
    total: i64,
    intent: Arc<IntentCounts>,
    /// Faults not yet applied, by time.
    pending: Vec<Planned>,
    done: Done,
    freeze_misses: usize,
    last_final: i64,
    last_progress: Instant,
    /// When the HA cluster's health was last asked (failover runs only).
    health_asked: Option<Instant>,
    /// Since when it has been unhealthy (a member down or rejoining, or
    /// no synchronous standby): a synchronous primary may not acknowledge
    /// a commit then, so the stall clock does not run.
    unhealthy_since: Option<Instant>,
    /// Kept so the bars stay drawn.
    _mp: MultiProgress,
    bars: Bars,
    faults_bar: ProgressBar,
}

/// What one look at the counts decided.
enum Verdict {
    Going,
    Finished,
    Stalled,
}

impl Live {
    fn new(cfg: &ChaosConfig, pending: Vec<Planned>, intent: Arc<IntentCounts>) -> Live {
        let mp = MultiProgress::new();
        let bars = Bars::add_to(&mp, cfg.actions);
        let faults_bar = status_line(&mp, "faults");
        let now = Instant::now();
        Live {
            t0: now,
            span: cfg.span(),
            deadline: now + Duration::from_secs(cfg.timeout_s),
            stall: cfg.stall(),
            total: cfg.actions as i64,
            intent,
            pending,
            done: Done::default(),
            freeze_misses: 0,
            last_final: -1,
            last_progress: now,
            health_asked: None,
            unhealthy_since: None,
            _mp: mp,
            bars,
            faults_bar,
        }
    }

    /// Whether every planned fault is done: the freezes may be given up
    /// after twice the span (nobody held actions when one was due).
    fn faults_done(&self) -> bool {
        let late = Instant::now() > self.t0 + self.span * 2;
        self.pending
            .iter()
            .all(|f| f.kind == FaultKind::Freeze && late)
    }

    fn judge(&mut self, s: &Summary, frozen: bool) -> Verdict {
        let final_count = crate::progress::at_rest_count(s);
        // No action may be able to finish while the cluster heals (a strict
        // synchronous primary without a standby holds every commit): the
        // stall clock restarts when it is healthy again.
        if self.unhealthy_since.is_some() || final_count != self.last_final {
            self.last_final = final_count;
            self.last_progress = Instant::now();
        } else if Instant::now() > self.t0 + self.span && self.last_progress.elapsed() > self.stall
        {
            return Verdict::Stalled;
        }
        // An enqueue refused as already expired made no action.
        let refused = self.intent.expired_at_enqueue.load(Ordering::Relaxed) as i64;
        let total = self.total - refused;
        let all_final = final_count >= total && s.total() >= total;
        if all_final && !frozen && self.faults_done() {
            return Verdict::Finished;
        }
        Verdict::Going
    }
}

impl Chaos {
    /// The loop: thaw, apply due faults, read the counts, decide. True when
    /// every action became final with the plan done.
    async fn drive(&mut self, live: &mut Live) -> Result<bool, RigError> {
        while Instant::now() < live.deadline {
            let now = Instant::now();
            // Thaw a frozen worker once its lease has surely run out.
            self.fleet.thaw(Some(now))?;
            self.apply_due(live, now).await?;
            self.watch_health(live).await;
            let s = match self.store.summary(1800).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "chaos: store unavailable (restart?)");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            live.bars.update(&s);
            live.faults_bar.set_message(self.fault_line(&live.done));
            match live.judge(&s, self.fleet.frozen()) {
                Verdict::Finished => return Ok(true),
                Verdict::Stalled => {
                    live.faults_bar.set_message(format!(
                        "stalled: no action became final for {} s",
                        live.stall.as_secs()
                    ));
                    return Ok(false);
                }
                Verdict::Going => {}
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(false)
    }

    /// Failover runs: asks Patroni how the cluster is, at most every
    /// [`HEALTH_EVERY_MS`], and adds the time it spends unhealthy to the
    /// failover row.
    async fn watch_health(&self, live: &mut Live) {
        let (Some(ha), Some(done)) = (self.ha.as_ref(), live.done.failover.as_mut()) else {
            return;
        };
        let now = Instant::now();
        if live
            .health_asked
            .is_some_and(|t| now < t + Duration::from_millis(HEALTH_EVERY_MS))
        {
            return;
        }
        live.health_asked = Some(now);
        // No answer from any node counts as unhealthy.
        let healthy = ha
            .rest()
            .cluster()
            .await
            .is_some_and(|v| v.healthy(ha.settings().synchronous));
        let now = Instant::now();
        match (healthy, live.unhealthy_since) {
            (false, None) => live.unhealthy_since = Some(now),
            (true, Some(since)) => {
                done.unhealthy(now - since);
                live.unhealthy_since = None;
            }
            _ => {}
        }
    }

    /// Applies every fault whose time has come, in time order; one that
    /// cannot land now (no worker to freeze) stays for the next look.
    async fn apply_due(&mut self, live: &mut Live, now: Instant) -> Result<(), RigError> {
        let mut i = 0;
        while i < live.pending.len() && live.t0 + live.pending[i].at <= now {
            let kind = live.pending[i].kind;
            if self.apply(live, kind).await? {
                live.pending.remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// One fault; false when it could not land now.
    async fn apply(&mut self, live: &mut Live, kind: FaultKind) -> Result<bool, RigError> {
        match kind {
            FaultKind::Kill => {
                // SIGKILL, confirmed from the wait status, then a replacement.
                let candidates = self.fleet.killable();
                if candidates.is_empty() {
                    return Ok(false);
                }
                let slot = candidates[self.rng.random_range(0..candidates.len())];
                if self.fleet.kill(slot).await? {
                    live.done.kills_sent += 1;
                    live.done.kills_confirmed += 1;
                }
                self.fleet.spawn(slot, self.rng.random())?;
            }
            FaultKind::PgRestart => {
                live.faults_bar.set_message("crash-restarting PostgreSQL");
                self.db.crash_restart().await?;
                live.done.pg_restarts += 1;
            }
            FaultKind::Freeze => return self.freeze_busiest(live).await,
            kind => {
                let (Some(ha), Some(done)) = (self.ha.as_mut(), live.done.failover.as_mut()) else {
                    return Err(RigError::Settings(format!("{kind:?} needs the HA cluster")));
                };
                live.faults_bar.set_message(format!("HA fault: {kind:?}"));
                failover::apply(ha, &self.store, kind, done).await?;
            }
        }
        Ok(true)
    }

    /// Freezes the worker holding the most actions, past its lease.
    async fn freeze_busiest(&mut self, live: &mut Live) -> Result<bool, RigError> {
        if self.fleet.frozen() {
            return Ok(false);
        }
        let Some(slot) = self.busiest_worker().await else {
            // Nobody holds anything this instant: try again shortly.
            live.freeze_misses += 1;
            return Ok(false);
        };
        let until = Instant::now() + Duration::from_millis(self.cfg.lease_ttl_ms * 2 + 500);
        let frozen = self.fleet.freeze(slot, until)?;
        if frozen {
            live.done.freezes += 1;
        }
        Ok(frozen)
    }

    /// The worker slot whose process holds the most actions right now.
    async fn busiest_worker(&self) -> Option<usize> {
        let owners = self.store.owners_holding().await.ok()?;
        owners.into_iter().find_map(|(owner, _)| {
            // Owners are host:pid:suffix.
            let pid: i32 = owner.split(':').nth(1)?.parse().ok()?;
            self.fleet.slot_of(pid)
        })
    }

    fn fault_line(&self, done: &Done) -> String {
        let f = &self.cfg.faults;
        format!(
            "kills {}/{} (confirmed {}) · PostgreSQL restarts {}/{} · freezes {}/{}{}",
            done.kills_sent,
            f.kills,
            done.kills_confirmed,
            done.pg_restarts,
            f.pg_restarts,
            done.freezes,
            f.freezes,
            if self.fleet.frozen() {
                " · a worker is frozen"
            } else {
                ""
            },
        ) + &done.failover.as_ref().map_or(String::new(), |f| {
            format!(
                " · failovers {} · postmaster restarts {}",
                f.failovers(),
                f.restarts
            )
        })
    }
}

/// How a chaos run ended, with its database still up until [`close`](Self::close).
pub struct ChaosOutcome {
    pub cfg: ChaosConfig,
    /// Every action became final with the plan done.
    pub finished: bool,
    /// Finished, and the verifier found nothing.
    pub passed: bool,
    pub wall: Duration,
    pub report: Report,
    pub done: Done,
    pub dir: PathBuf,
    db: Database,
    ha: Option<HaCluster>,
}

impl ChaosOutcome {
    /// The table of what was done to the system and what it absorbed.
    pub fn done_table(&self) -> String {
        let d = &self.done;
        let i = &d.intent;
        let rows: [(&str, String); 18] = [
            (
                "workers SIGKILLed (confirmed by wait status)",
                format!("{} of {}", d.kills_confirmed, d.kills_sent),
            ),
            ("PostgreSQL crash-restarts", d.pg_restarts.to_string()),
            (
                "workers frozen past their lease (SIGSTOP/SIGCONT)",
                d.freezes.to_string(),
            ),
            ("fenced writes refused", d.fenced_writes_refused.to_string()),
            (
                "actions reclaimed after a lease ran out",
                d.reclaims.to_string(),
            ),
            ("lookups", d.lookups.to_string()),
            (
                "resends (send lines after the first, per key)",
                d.resends.to_string(),
            ),
            (
                "unknown send outcomes seen (time-outs, 409, 5xx, resets)",
                d.timeouts_seen.to_string(),
            ),
            (
                "duplicate webhooks absorbed",
                d.duplicate_webhooks_absorbed.to_string(),
            ),
            (
                "backward (out-of-order) reports ignored",
                d.backward_reports_ignored.to_string(),
            ),
            (
                "actions enqueued with a not_before ahead (scheduled)",
                i.asked.scheduled.to_string(),
            ),
            (
                "actions enqueued with an expires_at ahead (expiring)",
                i.asked.expiring.to_string(),
            ),
            ("actions the courier ended expired", i.expired.to_string()),
            (
                "expiring enqueues refused as already expired",
                i.asked.expired_at_enqueue.to_string(),
            ),
            ("cancels sent", i.asked.cancels_sent.to_string()),
            (
                "actions the courier ended cancelled",
                i.cancelled.to_string(),
            ),
            (
                "cancels refused with 409 (claimed, dispatched or final)",
                i.asked.cancels_refused.to_string(),
            ),
            (
                "actions held unknown (the tier could not tell; listed for an operator)",
                d.held_unknown.to_string(),
            ),
        ];
        let mut t = String::from("| what was done to it | count |\n|---|---|\n");
        for (what, count) in rows {
            t.push_str(&format!("| {what} | {count} |\n"));
        }
        t
    }

    /// What the provider's log shows of flow control: each rated store's
    /// pacing against its bucket, the fake's 429s and the requests inside a
    /// shared pause; None for a run without flow control.
    pub fn flow_table(&self) -> Option<String> {
        self.done.flow.as_ref().map(FlowDone::table)
    }

    /// The failover run's rows (every one must be 0) and what was done to
    /// the cluster; None for a run without failovers.
    pub fn failover_table(&self) -> Option<String> {
        let f = self.done.failover.as_ref()?;
        let mut t = String::from("| failover check | result |\n|---|---|\n");
        for (what, v) in failover_checks(f) {
            t.push_str(&format!("| {what} | {v} |\n"));
        }
        let unplanned = f.kinds_unplanned();
        if !unplanned.is_empty() {
            let what = "not the whole proof: kinds not planned";
            t.push_str(&format!("| {what} | {} |\n", unplanned.join(", ")));
        }
        t.push_str("\n| what was done to the cluster | count |\n|---|---|\n");
        for (what, v) in failover_done(f) {
            t.push_str(&format!("| {what} | {v} |\n"));
        }
        Some(t)
    }

    fn report_fields(&self) -> ChaosReport<'_> {
        ChaosReport {
            seed: self.cfg.seed,
            passed: self.passed,
            wall_time_s: self.wall.as_secs_f64(),
            actions: self.cfg.actions,
            stores: self.cfg.stores,
            workers: self.cfg.workers,
            unsafe_resend: self.cfg.unsafe_resend,
            unsafe_ignore_expiry: self.cfg.unsafe_ignore_expiry,
            tier: self.cfg.tier,
            named: self.cfg.named,
            unsafe_worker_tier: self.cfg.unsafe_worker_tier,
            intent: self.cfg.intent,
            done: &self.done,
            verify: self.report.to_json(),
        }
    }

    /// The whole run as JSON: seed, verdict, counts, the verifier's report.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.report_fields()).expect("a chaos report always encodes")
    }

    /// The same, as the text of `--report` (fields in their stated order).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(&self.report_fields()).expect("a chaos report always encodes")
    }

    /// Stops the database, and removes the run directory unless `keep` or
    /// the run failed; returns the directory when it is kept.
    pub async fn close(self, keep: bool) -> Result<Option<PathBuf>, RigError> {
        self.db.stop().await?;
        if let Some(ha) = self.ha {
            ha.down().await?;
        }
        if keep || !self.passed {
            return Ok(Some(self.dir));
        }
        std::fs::remove_dir_all(&self.dir).ok();
        Ok(None)
    }
}

/// The failover run's checks: every one must be 0.
fn failover_checks(f: &FailoverDone) -> [(&'static str, String); 4] {
    let missing = f.kinds_missing();
    [
        (
            "enqueues acknowledged (201, or 200 on a retry) missing from the final primary",
            format!("{} of {}", f.acked_missing, f.acked),
        ),
        (
            "actions whose status went backwards across a failover",
            f.went_backwards.to_string(),
        ),
        (
            "writes the old primary acknowledged after waking from its pause",
            f.woken_writes.to_string(),
        ),
        (
            "kinds of failover planned but not done (node death, pause, switchover)",
            if missing.is_empty() {
                "0".into()
            } else {
                missing.join(", ")
            },
        ),
    ]
}

/// What the failover run did to the cluster.
fn failover_done(f: &FailoverDone) -> [(&'static str, String); 8] {
    let secs = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    [
        ("failovers", f.failovers().to_string()),
        (
            "node deaths (Patroni + PostgreSQL SIGKILLed, wait status and /proc)",
            f.node_deaths.to_string(),
        ),
        (
            "pauses past the TTL (SIGSTOP, SIGCONT)",
            f.pauses.to_string(),
        ),
        (
            "switchovers through Patroni's API",
            f.switchovers.to_string(),
        ),
        (
            "lossy deaths (WAL senders stopped first; the negative control)",
            f.lossy_deaths.to_string(),
        ),
        (
            "postmaster SIGKILLs restarted in place (not failovers)",
            format!("{} ({} in all)", f.restarts, secs(f.restart_ms)),
        ),
        (
            "timeline at the end; time without a primary (sum, longest)",
            format!(
                "{}; {}, {}",
                f.timeline,
                secs(f.no_primary_ms),
                secs(f.no_primary_max_ms)
            ),
        ),
        (
            "time the cluster was unhealthy after the faults (a member down or rejoining, or no synchronous standby; the stall clock stops)",
            secs(f.unhealthy_ms),
        ),
    ]
}
