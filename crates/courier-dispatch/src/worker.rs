//! The worker: claims actions, writes intents, sends, looks up, settles;
//! heartbeats the leases it holds; reconciles overdue final statuses.
//!
//! One process runs one [`Worker`]: a claimer loop, a heartbeat loop, a
//! reconciler loop, and one task per claimed action (at most
//! `worker_concurrency_max`). Decisions come from `courier_core::step`; this
//! module only performs them.
//!
//! # Invariants
//! - No request leaves without an attempt counted (fenced) just before it,
//!   and without the local lease check passing just before that.
//! - A task whose lease was found fenced writes nothing more and sends nothing more.
//! - A database outage pauses work (retry with backoff); it never kills the
//!   process and never turns into a guess about the provider.

use courier_core::backoff::delay_ms;
use courier_core::step::{after_claim, after_lookup, after_send, may_send, Step};
use courier_core::{action_key, Limits};
use courier_provider::{LookupOutcome, ProviderClient, SendOutcome};

/// What the worker needs of a provider: the contract's send and lookup, with
/// answers classified by what the caller does next. [`ProviderClient`] is the
/// real one (HTTP); benchmarks plug in an in-process stub to measure the
/// claim-to-settle path alone.
pub trait Provider: Send + Sync + 'static {
    fn send(&self, key: &str, to: &str, body: &str) -> impl Future<Output = SendOutcome> + Send;
    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send;
}

impl Provider for ProviderClient {
    fn send(&self, key: &str, to: &str, body: &str) -> impl Future<Output = SendOutcome> + Send {
        ProviderClient::send(self, key, to, body)
    }
    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send {
        ProviderClient::lookup(self, key)
    }
}
use crate::group_commit::GroupCommit;
use courier_store::{
    AttemptRefused, ClaimMode, Claimed, Fenced, Lease, PgStore, SettleOutcome, SettleReq,
    StoreError,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
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
    pub seed: u64,
    /// A deliberately broken mode, for the negative control of the chaos run
    /// only: it shows that the verifier catches what the protocol prevents.
    pub unsafe_resend: Option<UnsafeResend>,
}

/// How the broken mode resends after an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnsafeResend {
    /// Resend at once with the same key, without a lookup (a blind resend).
    NoLookup,
    /// Resend at once with a new key (a second message).
    NewKey,
}

/// Counters of one worker, also exported as metrics.
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
    pub fenced: AtomicU64,
    pub store_retries: AtomicU64,
}

struct Held {
    epoch: i64,
    /// Lease end as this process measured it, in ms since `Worker::t0`.
    deadline_ms: Arc<AtomicU64>,
    fenced: CancellationToken,
}

struct Ctx<P> {
    store: PgStore,
    client: P,
    cfg: WorkerConfig,
    owner: Arc<str>,
    t0: Instant,
    held: Mutex<HashMap<i64, Held>>,
    stats: WorkerStats,
    /// Settles of this worker's tasks, committed together.
    settles: GroupCommit<SettleReq, Result<SettleOutcome, StoreError>>,
}

impl<P> Ctx<P> {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A worker process's runtime.
pub struct Worker<P = ProviderClient> {
    ctx: Arc<Ctx<P>>,
}

impl<P: Provider> Worker<P> {
    /// Must be called within a tokio runtime: it starts the settle batcher.
    pub fn new(store: PgStore, client: P, cfg: WorkerConfig) -> Self {
        let owner: Arc<str> = Arc::from(cfg.owner.as_str());
        let settles = {
            let store = store.clone();
            let overdue = cfg.limits.final_overdue_ms;
            // Two batches at once, so one commits while the next fills.
            GroupCommit::start(
                cfg.limits.worker_concurrency_max as usize,
                2,
                move |reqs: Vec<SettleReq>| {
                    let store = store.clone();
                    async move { store.actions_settle(&reqs, overdue).await }
                },
            )
        };
        Worker {
            ctx: Arc::new(Ctx {
                store,
                client,
                cfg,
                owner,
                t0: Instant::now(),
                held: Mutex::new(HashMap::new()),
                stats: WorkerStats::default(),
                settles,
            }),
        }
    }

    pub fn stats(&self) -> &WorkerStats {
        &self.ctx.stats
    }

    /// Runs until `shutdown` is cancelled, then lets the actions in hand
    /// finish (their leases would otherwise run out and be reclaimed).
    pub async fn run(&self, shutdown: CancellationToken) {
        let ctx = self.ctx.clone();
        let heartbeat = tokio::spawn(heartbeat_loop(ctx.clone()));
        let reconciler = ctx
            .cfg
            .reconcile
            .then(|| tokio::spawn(reconcile_loop(ctx.clone(), shutdown.clone())));
        claim_loop(ctx.clone(), shutdown.clone()).await;
        heartbeat.abort();
        if let Some(r) = reconciler {
            r.abort();
        }
    }
}

async fn claim_loop<P: Provider>(ctx: Arc<Ctx<P>>, shutdown: CancellationToken) {
    let limits = &ctx.cfg.limits;
    let mut tasks = JoinSet::new();
    let mut rng = StdRng::seed_from_u64(ctx.cfg.seed);
    let mut store_retry = 0u32;
    while !shutdown.is_cancelled() {
        while tasks.try_join_next().is_some() {}
        let room = limits.worker_concurrency_max as usize - tasks.len();
        if room == 0 {
            tokio::select! {
                _ = tasks.join_next() => {}
                _ = shutdown.cancelled() => break,
            }
            continue;
        }
        let n = room.min(limits.claim_batch_max as usize) as u32;
        let claim_started = Instant::now();
        let claim_started_ms = ctx.now_ms();
        let claim = ctx
            .store
            .action_claim_to_send(
                &ctx.owner,
                n,
                limits.lease_ttl_ms,
                limits.store_in_flight_max,
                ctx.cfg.claim_mode,
            )
            .await;
        crate::metrics::claim_observed(claim_started.elapsed());
        ctx.stats.claims.fetch_add(1, Ordering::Relaxed);
        ctx.stats.claim_us_max.fetch_max(
            u64::try_from(claim_started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        match claim {
            Ok(claimed) if claimed.is_empty() => {
                store_retry = 0;
                ctx.stats.claims_empty.fetch_add(1, Ordering::Relaxed);
                let wait = ctx.cfg.idle_poll_ms / 2 + rng.random_range(0..=ctx.cfg.idle_poll_ms);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    _ = tasks.join_next(), if !tasks.is_empty() => {}
                    _ = shutdown.cancelled() => break,
                }
            }
            Ok(claimed) => {
                store_retry = 0;
                // The database started the lease after we sent the claim:
                // measuring from the moment we sent it errs on the safe side
                // (the first send of a fresh action relies on this check alone).
                let deadline = claim_started_ms + limits.lease_ttl_ms;
                for c in claimed {
                    ctx.stats.claimed.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("courier_claims_total").increment(1);
                    if c.reclaimed {
                        ctx.stats.reclaimed.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("courier_reclaims_total").increment(1);
                        let epoch = c.lease.epoch.to_string();
                        ctx.store
                            .event_record("reclaimed", Some(c.lease.action_id), &epoch)
                            .await
                            .ok();
                    }
                    let fenced = CancellationToken::new();
                    let deadline_ms = Arc::new(AtomicU64::new(deadline));
                    ctx.held.lock().expect("held map").insert(
                        c.lease.action_id,
                        Held {
                            epoch: c.lease.epoch,
                            deadline_ms: deadline_ms.clone(),
                            fenced: fenced.clone(),
                        },
                    );
                    let ctx2 = ctx.clone();
                    let seed = rng.random();
                    tasks.spawn(async move {
                        let id = c.lease.action_id;
                        deliver(&ctx2, c, deadline_ms, fenced, seed).await;
                        ctx2.held.lock().expect("held map").remove(&id);
                    });
                }
            }
            Err(e) => {
                ctx.stats.store_retries.fetch_add(1, Ordering::Relaxed);
                let wait = delay_ms(store_retry, 100, 2_000, &mut rng);
                store_retry += 1;
                tracing::warn!(error = %e, wait_ms = wait, "claim failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        }
    }
    // Let the actions in hand finish: abandoning them would only delay them
    // by a lease, but finishing is cleaner.
    while tasks.join_next().await.is_some() {}
}

/// Extends every lease this process holds; cancels the tasks found fenced.
/// It keeps running through shutdown, while the actions in hand finish, and
/// is stopped by [`Worker::run`] after the last of them.
async fn heartbeat_loop<P: Provider>(ctx: Arc<Ctx<P>>) {
    let interval = Duration::from_millis(ctx.cfg.limits.heartbeat_interval_ms);
    loop {
        tokio::time::sleep(interval).await;
        heartbeat_once(&ctx).await;
    }
}

async fn heartbeat_once<P: Provider>(ctx: &Ctx<P>) {
    let held: Vec<(i64, i64)> = ctx
        .held
        .lock()
        .expect("held map")
        .iter()
        .map(|(id, h)| (*id, h.epoch))
        .collect();
    if held.is_empty() {
        return;
    }
    let before = ctx.now_ms();
    match ctx
        .store
        .action_heartbeat(&ctx.owner, &held, ctx.cfg.limits.lease_ttl_ms)
        .await
    {
        Ok(beat) => {
            let mut lost = Vec::new();
            {
                let map = ctx.held.lock().expect("held map");
                for id in &beat.held {
                    if let Some(h) = map.get(id) {
                        h.deadline_ms
                            .fetch_max(before + ctx.cfg.limits.lease_ttl_ms, Ordering::Relaxed);
                    }
                }
                for id in &beat.fenced {
                    if let Some(h) = map.get(id) {
                        // Another worker holds it at a newer epoch.
                        h.fenced.cancel();
                        lost.push(*id);
                    }
                }
            }
            for id in lost {
                metrics::counter!("courier_fenced_writes_total", "op" => "heartbeat").increment(1);
                ctx.store
                    .event_record("fenced", Some(id), "heartbeat")
                    .await
                    .ok();
            }
        }
        Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
    }
}

/// Extends one lease now (before a send, when it is short).
/// False only when the action is fenced, or its row stayed locked (by a
/// claimer re-checking an expired lease) for a second: the heartbeat never
/// waits for a lock, so a row locked at that moment is asked about again.
async fn extend_one<P: Provider>(
    ctx: &Ctx<P>,
    lease: &Lease,
    deadline_ms: &AtomicU64,
) -> Result<bool, StoreError> {
    const LOCKED_RETRIES: u32 = 50;
    for _ in 0..LOCKED_RETRIES {
        let before = ctx.now_ms();
        let beat = ctx
            .store
            .action_heartbeat(
                &ctx.owner,
                &[(lease.action_id, lease.epoch)],
                ctx.cfg.limits.lease_ttl_ms,
            )
            .await?;
        if beat.held.contains(&lease.action_id) {
            deadline_ms.fetch_max(before + ctx.cfg.limits.lease_ttl_ms, Ordering::Relaxed);
            return Ok(true);
        }
        if beat.fenced.contains(&lease.action_id) {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(false)
}

/// Runs a store call until it answers, pausing while the database is away.
/// Returns None when the action was fenced meanwhile (by the heartbeat).
async fn with_retry<P, T, F, Fut>(
    ctx: &Ctx<P>,
    fenced: &CancellationToken,
    rng: &mut StdRng,
    mut op: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut retry = 0;
    loop {
        if fenced.is_cancelled() {
            return None;
        }
        match op().await {
            Ok(v) => return Some(v),
            Err(e) => {
                ctx.stats.store_retries.fetch_add(1, Ordering::Relaxed);
                if !e.is_unavailable() {
                    tracing::error!(error = %e, "store error");
                }
                let wait = delay_ms(retry, 100, 2_000, rng);
                retry += 1;
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
    }
}

fn note_fenced<P>(ctx: &Ctx<P>, lease: &Lease, what: &str, f: Option<Fenced>) {
    ctx.stats.fenced.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("courier_fenced_writes_total", "op" => what.to_string()).increment(1);
    tracing::info!(
        action = lease.action_id,
        epoch = lease.epoch,
        current_epoch = ?f.and_then(|f| f.current_epoch),
        op = what,
        "fenced: another worker holds this action; abandoning it"
    );
}

/// The life of one claimed action in this worker.
async fn deliver<P: Provider>(
    ctx: &Ctx<P>,
    claimed: Claimed,
    deadline_ms: Arc<AtomicU64>,
    fenced: CancellationToken,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let lease = claimed.lease.clone();
    let key = action_key(&claimed.uid);
    let limits = &ctx.cfg.limits;

    // The claim wrote the intent and counted the first attempt; otherwise
    // (a reclaim) read the intent and decide from what it says.
    let mut counted_ahead = claimed.attempt_counted;
    let mut step = if counted_ahead {
        Step::Send
    } else {
        let Some(intent) = with_retry(ctx, &fenced, &mut rng, || {
            ctx.store.outbox_intent(&lease, &key)
        })
        .await
        else {
            return note_fenced(ctx, &lease, "heartbeat", None);
        };
        match intent {
            Ok(i) => after_claim(i.attempts, i.status),
            Err(f) => {
                ctx.store
                    .event_record("fenced", Some(lease.action_id), "intent")
                    .await
                    .ok();
                return note_fenced(ctx, &lease, "intent", Some(f));
            }
        }
    };
    // The key every request carries; only the broken demonstration mode changes it.
    let mut send_key = key.clone();
    let mut message_id: Option<String> = None;
    let mut from_lookup = false;
    let mut retries = 0u32;
    loop {
        if fenced.is_cancelled() {
            return note_fenced(ctx, &lease, "heartbeat", None);
        }
        step = match step {
            Step::Lookup => {
                ctx.stats.lookups.fetch_add(1, Ordering::Relaxed);
                let out = ctx.client.lookup(&key).await;
                metrics::counter!("courier_lookups_total", "answer" => lookup_label(&out))
                    .increment(1);
                if let LookupOutcome::Found(m) = &out {
                    message_id = Some(m.id.clone());
                    from_lookup = true;
                }
                if let LookupOutcome::Unknown(why) = &out {
                    tracing::debug!(action = lease.action_id, why, "lookup unknown");
                }
                after_lookup(&out.answer())
            }
            Step::RetryLookup => {
                let wait = delay_ms(
                    retries,
                    limits.backoff_base_ms,
                    limits.backoff_cap_ms,
                    &mut rng,
                );
                retries += 1;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    _ = fenced.cancelled() => {}
                }
                Step::Lookup
            }
            Step::Send if std::mem::take(&mut counted_ahead) => {
                // Counted by the claim.
                send_counted(
                    ctx,
                    &lease,
                    &claimed,
                    &key,
                    (&fenced, &deadline_ms),
                    &mut send_key,
                    &mut rng,
                    (&mut message_id, &mut from_lookup),
                )
                .await
            }
            Step::Send => {
                // The local check first: if the lease may end before the
                // request lands, extend it; a fenced extension ends the task.
                if !may_send(
                    ctx.now_ms(),
                    deadline_ms.load(Ordering::Relaxed),
                    limits.send_margin_ms,
                ) {
                    match with_retry(ctx, &fenced, &mut rng, || {
                        extend_one(ctx, &lease, &deadline_ms)
                    })
                    .await
                    {
                        Some(true) => {}
                        Some(false) | None => {
                            ctx.store
                                .event_record("fenced", Some(lease.action_id), "extend")
                                .await
                                .ok();
                            return note_fenced(ctx, &lease, "extend", None);
                        }
                    }
                }
                let counted = with_retry(ctx, &fenced, &mut rng, || {
                    ctx.store
                        .outbox_count_attempt(&lease, limits.send_margin_ms)
                })
                .await;
                match counted {
                    None => return note_fenced(ctx, &lease, "heartbeat", None),
                    Some(Err(AttemptRefused::Fenced(f))) => {
                        ctx.store
                            .event_record("fenced", Some(lease.action_id), "attempt")
                            .await
                            .ok();
                        return note_fenced(ctx, &lease, "attempt", Some(f));
                    }
                    Some(Err(AttemptRefused::LeaseShort)) => {
                        // Extend and try again; nothing was counted.
                        match with_retry(ctx, &fenced, &mut rng, || {
                            extend_one(ctx, &lease, &deadline_ms)
                        })
                        .await
                        {
                            Some(true) => Step::Send,
                            _ => return note_fenced(ctx, &lease, "extend", None),
                        }
                    }
                    Some(Ok(_attempts)) => {
                        send_counted(
                            ctx,
                            &lease,
                            &claimed,
                            &key,
                            (&fenced, &deadline_ms),
                            &mut send_key,
                            &mut rng,
                            (&mut message_id, &mut from_lookup),
                        )
                        .await
                    }
                }
            }
            Step::Settle(status) => {
                let Some(res) = with_retry(ctx, &fenced, &mut rng, || async {
                    ctx.settles
                        .call(SettleReq {
                            lease: lease.clone(),
                            report: status,
                            message_id: message_id.clone(),
                            from_lookup,
                        })
                        .await?
                })
                .await
                else {
                    return note_fenced(ctx, &lease, "heartbeat", None);
                };
                match res {
                    SettleOutcome::Settled(s) => {
                        ctx.stats.settled.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("courier_settled_total").increment(1);
                        tracing::debug!(action = lease.action_id, status = %s.status, "settled");
                    }
                    SettleOutcome::Fenced(f) => note_fenced(ctx, &lease, "settle", Some(f)),
                }
                return;
            }
            Step::Fail(reason) => {
                tracing::error!(
                    action = lease.action_id,
                    reason,
                    "provider rejected the action; marking it failed"
                );
                metrics::counter!("courier_rejections_total").increment(1);
                let Some(res) = with_retry(ctx, &fenced, &mut rng, || {
                    ctx.store.action_fail(&lease, &reason)
                })
                .await
                else {
                    return note_fenced(ctx, &lease, "heartbeat", None);
                };
                match res {
                    Ok(()) => {
                        ctx.stats.failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(f) => note_fenced(ctx, &lease, "fail", Some(f)),
                }
                return;
            }
        };
    }
}

/// After an attempt was counted: sends once if the lease check passes right
/// now, and says what comes next. If it does not pass, the next step is a
/// lookup: from a counted attempt on, every path looks the key up before
/// any further send.
#[allow(clippy::too_many_arguments)]
async fn send_counted<P: Provider>(
    ctx: &Ctx<P>,
    lease: &Lease,
    claimed: &Claimed,
    key: &str,
    (fenced, deadline_ms): (&CancellationToken, &AtomicU64),
    send_key: &mut String,
    rng: &mut StdRng,
    (message_id, from_lookup): (&mut Option<String>, &mut bool),
) -> Step {
    if fenced.is_cancelled()
        || !may_send(
            ctx.now_ms(),
            deadline_ms.load(Ordering::Relaxed),
            ctx.cfg.limits.send_margin_ms,
        )
    {
        return Step::Lookup;
    }
    ctx.stats.sends.fetch_add(1, Ordering::Relaxed);
    let out = ctx.client.send(send_key, &claimed.to, &claimed.body).await;
    metrics::counter!("courier_sends_total", "answer" => send_label(&out)).increment(1);
    match &out {
        SendOutcome::Accepted(m) | SendOutcome::Replayed(m) => {
            *message_id = Some(m.id.clone());
            *from_lookup = false;
            after_send(&out.answer())
        }
        SendOutcome::Unknown(why) => {
            ctx.stats.sends_unknown.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(action = lease.action_id, why, "send outcome unknown");
            ctx.store
                .event_record("send_unknown", Some(lease.action_id), why)
                .await
                .ok();
            match ctx.cfg.unsafe_resend {
                None => after_send(&out.answer()),
                // The broken modes skip the lookup.
                Some(UnsafeResend::NoLookup) => Step::Send,
                Some(UnsafeResend::NewKey) => {
                    *send_key = format!("{key}-unsafe-{}", rng.random::<u32>());
                    Step::Send
                }
            }
        }
        SendOutcome::Rejected {
            status: 401 | 403,
            error,
        } => {
            // Our credentials, not the action: alert and keep asking; never
            // fail the action for it.
            tracing::error!(status = 401, error, "provider refused our credentials");
            Step::RetryLookup
        }
        SendOutcome::Rejected { .. } => after_send(&out.answer()),
    }
}

fn send_label(o: &SendOutcome) -> &'static str {
    match o {
        SendOutcome::Accepted(_) => "accepted",
        SendOutcome::Replayed(_) => "replayed",
        SendOutcome::Rejected { .. } => "rejected",
        SendOutcome::Unknown(_) => "unknown",
    }
}

fn lookup_label(o: &LookupOutcome) -> &'static str {
    match o {
        LookupOutcome::Found(_) => "found",
        LookupOutcome::NotFound => "not_found",
        LookupOutcome::Unknown(_) => "unknown",
    }
}

/// Looks up actions whose final status is overdue (or in conflict) and merges
/// what the provider says; reports intents older than the alert threshold.
async fn reconcile_loop<P: Provider>(ctx: Arc<Ctx<P>>, shutdown: CancellationToken) {
    let limits = ctx.cfg.limits.clone();
    let mut last_age_check = Instant::now() - Duration::from_secs(3600);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.cancelled() => return,
        }
        let due = match ctx
            .store
            .outbox_due_checks(32, limits.final_overdue_ms)
            .await
        {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "reconciler: cannot read due checks");
                continue;
            }
        };
        let lookups = due.into_iter().map(|d| {
            let ctx = ctx.clone();
            async move {
                let out = ctx.client.lookup(&d.key).await;
                metrics::counter!("courier_lookups_total", "answer" => lookup_label(&out)).increment(1);
                match out {
                    LookupOutcome::Found(m) => {
                        if let Err(e) = ctx.store.lookup_merge(&d.key, m.status, &m.id).await {
                            tracing::warn!(error = %e, "reconciler: merge failed");
                        }
                    }
                    LookupOutcome::NotFound => tracing::warn!(
                        action = d.action_id,
                        key = d.key,
                        "reconciler: provider does not know an accepted key (lookup lag or expired retention)"
                    ),
                    LookupOutcome::Unknown(why) => tracing::debug!(why, "reconciler: lookup unknown"),
                }
            }
        });
        futures::future::join_all(lookups).await;
        if last_age_check.elapsed() > Duration::from_secs(10) {
            last_age_check = Instant::now();
            let old = ctx
                .store
                .intents_older_than(limits.intent_age_alert_s())
                .await;
            if let Ok(n) = &old {
                metrics::gauge!("courier_intents_older_than_alert").set(*n as f64);
            }
            match old {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    count = n,
                    threshold_s = limits.intent_age_alert_s(),
                    "open intents older than the alert threshold: past the provider's key retention a resend could be a second message"
                ),
                Err(e) => tracing::warn!(error = %e, "reconciler: cannot count old intents"),
            }
        }
    }
}
