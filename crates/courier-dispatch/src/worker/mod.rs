//! The worker: claims actions, writes intents, sends, looks up, settles;
//! heartbeats the leases it holds; reconciles overdue final statuses.
//!
//! One process runs one [`Worker`]: one file per loop, over one shared
//! context ([`context`]):
//!
//! - [`claim`]: the claimer; it starts one [`delivery::Delivery`] per
//!   claimed action (at most `worker_concurrency_max` at once), and looks
//!   for expired leases and sweeps `store_work` as [`pacing`] says;
//! - [`delivery`]: one action's delivery, a struct whose methods are the
//!   steps (`delivery/send.rs`, `delivery/lookup.rs`, `delivery/settle.rs`);
//! - [`heartbeat`]: extends the leases in hand, cancels deliveries found fenced;
//! - [`reconcile`]: looks up overdue final statuses and conflicts;
//! - [`schedule`]: makes due scheduled actions pending and expires
//!   unclaimed actions past their deadline;
//! - [`crate::pruner`]: retention, the fold of the maintained counts, the
//!   trim of recent acceptances (when [`WorkerConfig::pruner`] says so).
//!
//! [`Worker::run`] starts every one of them and stops them all: a caller
//! (`courier worker`, the benchmark adapter, a test) configures a worker
//! and runs it, and starts no loop of its own for it.
//!
//! Every decision comes from `courier_core::step` (what to do next),
//! `courier_core::tier` (what finding out about earlier attempts means for
//! the provider's tier),
//! `courier_core::lease` (the local deadline) and `courier_core::backoff`
//! (how long to wait); this module performs them and reports each outcome
//! once: an [`event::Event`] handed to `Ctx::observe` ([`observe`]).
//!
//! # Invariants
//! - No request leaves without an attempt counted (fenced) just before it,
//!   and without the local lease check passing just before that.
//! - A task whose lease was found fenced writes nothing more and sends nothing more.
//! - A database outage pauses work (retry with backoff); it never kills the
//!   process and never turns into a guess about the provider.
//! - Time is `tokio::time` (a test could pause it; none does: the tests that
//!   move time move the store's `Clock` instead, and the worker's local
//!   lease clock runs in real time).

mod claim;
mod context;
mod delivery;
mod event;
mod gate;
mod heartbeat;
mod observe;
pub mod pacing;
mod reconcile;
mod schedule;

use crate::pruner::PrunerConfig;
use context::Ctx;
use courier_core::{Limits, Tier};
/// The provider trait lives with the contract (`courier-provider`); it is
/// re-exported here, where the worker is.
pub use courier_provider::Provider;
use courier_provider::ProviderClient;
use courier_store::{ClaimMode, PgStore};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a worker needs besides the store and the provider client.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub limits: Limits,
    pub claim_mode: ClaimMode,
    /// This process's identity as a lease owner.
    pub owner: String,
    /// How long an idle claimer waits before asking again.
    pub idle_poll_ms: u64,
    /// Whether this worker also runs the reconciler.
    pub reconcile: bool,
    /// The pruner this worker runs beside its other loops: what `courier
    /// worker` runs is [`PrunerConfig::new`] of its retention. `None` runs
    /// none: the benchmarks, whose figures measure the protocol without
    /// maintenance, and tests that count rows.
    pub pruner: Option<PrunerConfig>,
    pub seed: u64,
    /// The provider's guarantee tier (`courier_core::tier`): what a lookup
    /// means for it, and so what this worker promises.
    pub tier: Tier,
    /// The provider's name in `provider_gates` (migration 27): its ceiling
    /// meters this worker's claims, and a "too many requests" from it
    /// pauses every worker that names it. Workers that send through one
    /// provider account name it alike. None: no ceiling, and a 429 pauses
    /// this worker alone.
    pub provider_gate: Option<String>,
}

/// Counters of one worker, also exported as metrics (both written by
/// [`observe`], nowhere else).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Claim statements run, and how many of them found nothing.
    pub claims: AtomicU64,
    pub claims_empty: AtomicU64,
    /// The slowest claim statement so far, in microseconds.
    pub claim_us_max: AtomicU64,
    pub claimed: AtomicU64,
    pub reclaimed: AtomicU64,
    pub sends: AtomicU64,
    pub sends_unknown: AtomicU64,
    pub lookups: AtomicU64,
    pub settled: AtomicU64,
    pub failed: AtomicU64,
    /// Actions this worker ended expired: claimed ones past their deadline
    /// with no message at the provider, and unclaimed ones its schedule
    /// ticks expired.
    pub expired: AtomicU64,
    /// Scheduled actions its schedule ticks made pending.
    pub promoted: AtomicU64,
    /// Actions it held `unknown` (the provider's tier gave no way to learn
    /// an attempt's outcome).
    pub held_unknown: AtomicU64,
    pub fenced: AtomicU64,
    pub store_retries: AtomicU64,
}

/// A worker process's runtime.
pub struct Worker<P = ProviderClient> {
    ctx: Arc<Ctx<P>>,
}

impl<P: Provider> Worker<P> {
    /// Must be called within a tokio runtime: it starts the settle batcher.
    pub fn new(store: PgStore, client: P, cfg: WorkerConfig) -> Self {
        Worker {
            ctx: Arc::new(Ctx::new(store, client, cfg)),
        }
    }

    /// Arms the crash points of this worker (see [`crate::failpoint`]).
    /// Call it before [`Worker::run`].
    #[cfg(feature = "failpoints")]
    pub fn with_failpoints(mut self, hook: crate::failpoint::Hook) -> Self {
        Arc::get_mut(&mut self.ctx)
            .expect("failpoints are armed before the worker runs")
            .failpoints = crate::failpoint::Failpoints::armed(hook);
        self
    }

    /// The negative control of the expiry: this worker ignores every
    /// action's `expires_at` (its deliveries see no deadline, its schedule
    /// ticks expire nothing), so that the verifier's row of sends after the
    /// deadline has something to catch. Call it before [`Worker::run`].
    #[cfg(feature = "negative-controls")]
    pub fn with_unsafe_ignore_expiry(mut self) -> Self {
        Arc::get_mut(&mut self.ctx)
            .expect("the expiry is ignored before the worker runs")
            .ignore_expiry = true;
        self
    }

    pub fn stats(&self) -> &WorkerStats {
        &self.ctx.stats
    }

    /// Runs every loop of the worker (claims and their deliveries, the
    /// heartbeat, the reconciler and the pruner as configured) until
    /// `shutdown` is cancelled, then lets the actions in hand finish (their
    /// leases would otherwise run out and be reclaimed) and stops the rest.
    /// A pruner's batch cut short is rolled back, as a SIGKILLed worker's is.
    /// With failpoints armed, it also returns when a crash point fires: then
    /// everything in hand is dropped where it stood, as a SIGKILL would.
    pub async fn run(&self, shutdown: CancellationToken) {
        let ctx = self.ctx.clone();
        let heartbeat = tokio::spawn(heartbeat::run(ctx.clone()));
        let reconciler = ctx
            .cfg
            .reconcile
            .then(|| tokio::spawn(reconcile::run(ctx.clone(), shutdown.clone())));
        let schedule = tokio::spawn(schedule::run(ctx.clone(), shutdown.clone()));
        let pruner = ctx.cfg.pruner.clone().map(|cfg| {
            let store = ctx.store.clone();
            tokio::spawn(crate::pruner::run(store, cfg, shutdown.clone()))
        });
        let claims = claim::run(ctx.clone(), shutdown);
        #[cfg(feature = "failpoints")]
        let claims = ctx.failpoints.until_crash(claims);
        claims.await;
        heartbeat.abort();
        schedule.abort();
        for other in [reconciler, pruner].into_iter().flatten() {
            other.abort();
        }
    }
}
