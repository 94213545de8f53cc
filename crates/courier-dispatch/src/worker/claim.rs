//! The claimer: claims as many actions as there is room for, in one
//! statement, and starts one delivery per action.
//!
//! # Invariants
//! - At most `worker_concurrency_max` deliveries run at once.
//! - An action is in the held map (renewed by the heartbeat) before its
//!   delivery starts, with the local deadline measured from the moment the
//!   claim was sent (`courier_core::lease::deadline_ms`).
//! - A claim's deliveries start before its sweep of `store_work` runs.
//! - A claim that comes back short of the room it asked for is followed by
//!   the next after the poll interval or a delivery's end, as an empty one
//!   is; a full one at once.
//! - A claim's sweep runs before the next claim, or waits to run with later
//!   claims' sweeps as one statement: until it is due
//!   ([`super::pacing::SweepPacing::due`], checked after every claim; an
//!   idle claimer claims every poll interval), or until the claimer waits
//!   for room or stops; a sweep held back holds no connection. A sweep ends
//!   (or is given up after a lease time) before the claim after it.
//! - A claim looks for expired leases when [`super::pacing::ReclaimPacing`]
//!   says so: the first, the one after a short claim, and once a second
//!   while claims come back full.
//! - While the provider is paused (a pause a claim came back with, or one
//!   of this worker's own: `gate.rs`) the claimer does not claim; a
//!   claimer with no room reads the pause every
//!   [`super::gate::REFRESH_BUSY_MS`], so that every worker learns it.

use super::context::{bounded, Ctx, Held};
use super::delivery::Delivery;
use super::event::Event;
use super::pacing::{ReclaimPacing, SweepPacing};
use super::Provider;
use courier_core::backoff::{idle_wait_ms, store_retry_delay_ms};
use courier_core::lease::{deadline_ms, expires_ms};
use courier_store::{ClaimReq, ClaimTaken, Claimed};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(super) async fn run<P: Provider>(ctx: Arc<Ctx<P>>, shutdown: CancellationToken) {
    let limits = &ctx.cfg.limits;
    let mut tasks = JoinSet::new();
    let mut rng = StdRng::seed_from_u64(ctx.cfg.seed);
    let mut store_retry = 0u32;
    let mut reclaims = ReclaimPacing::default();
    let mut sweeps = SweepPacing::default();
    while !shutdown.is_cancelled() {
        while tasks.try_join_next().is_some() {}
        let max = limits.worker_concurrency_max as usize;
        assert!(
            tasks.len() <= max,
            "{} deliveries at once, {max} allowed",
            tasks.len()
        );
        let room = max - tasks.len();
        if room == 0 {
            // About to wait for room: the sweep held back runs now.
            sweep(&ctx, sweeps.take()).await;
            tokio::select! {
                _ = tasks.join_next() => {}
                // No claim runs meanwhile to bring back another worker's
                // pause: read it.
                _ = tokio::time::sleep(Duration::from_millis(super::gate::REFRESH_BUSY_MS)),
                    if ctx.gate.name.is_some() => refresh_pause(&ctx).await,
                _ = shutdown.cancelled() => break,
            }
            continue;
        }
        // Paused: nothing leaves for the provider, so claim nothing either.
        if let Some(ms) = ctx.gate.remaining_ms(ctx.now_ms()) {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = shutdown.cancelled() => break,
            }
            continue;
        }
        let n = room.min(limits.claim_batch_max as usize) as u32;
        // How long to wait before the next claim, and whether the end of a
        // delivery cuts the wait short (only when idle, not after a failure).
        let (wait_ms, idle) = match claim(&ctx, n, &mut reclaims).await {
            Ok((taken, _)) if taken.claimed.is_empty() => {
                store_retry = 0;
                sweeps.owe(taken.sweep, Instant::now());
                sweep(&ctx, sweeps.due(Instant::now())).await;
                (idle_wait_ms(ctx.cfg.idle_poll_ms, &mut rng), true)
            }
            Ok((taken, sent_ms)) => {
                store_retry = 0;
                let full = taken.claimed.len() >= n as usize;
                let deadline = deadline_ms(sent_ms, limits.lease_ttl_ms);
                for c in taken.claimed {
                    let expires =
                        expires_ms(sent_ms, c.expires_in_ms).filter(|_| !ctx.ignore_expiry);
                    let times = ClaimTimes {
                        sent_ms,
                        deadline_ms: deadline,
                        expires_ms: expires,
                    };
                    start(&ctx, &mut tasks, c, times, rng.random()).await;
                }
                // The deliveries are under way; now the sweep the claim owes,
                // or later, with the next claims' sweeps.
                sweeps.owe(taken.sweep, Instant::now());
                sweep(&ctx, sweeps.due(Instant::now())).await;
                if full {
                    // More may be pending: claim again at once.
                    continue;
                }
                // It took all it could (nothing else pending, or the other
                // stores at their cap): claiming again at once would mostly
                // find nothing (1.5-1.9 claims per action in `courier bench
                // fairness` did). Wait as an empty claim does: the poll
                // interval, or a delivery's end (a store's slot freed).
                (idle_wait_ms(ctx.cfg.idle_poll_ms, &mut rng), true)
            }
            Err(e) => {
                ctx.observe(Event::StoreRetry { error: &e }).await;
                let wait = store_retry_delay_ms(store_retry, &mut rng);
                store_retry += 1;
                tracing::warn!(error = %e, wait_ms = wait, "claim failed; retrying");
                (wait, false)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            // An idle claimer asks again as soon as a delivery ends.
            _ = tasks.join_next(), if idle && !tasks.is_empty() => {}
            _ = shutdown.cancelled() => break,
        }
    }
    sweep(&ctx, sweeps.take()).await;
    // Let the actions in hand finish: abandoning them would only delay them
    // by a lease, but finishing is cleaner.
    while tasks.join_next().await.is_some() {}
}

/// One claim statement, looking for expired leases when `reclaims` says so;
/// also returns when it was sent, on the lease clock. The sweep it names is
/// the caller's to run.
async fn claim<P: Provider>(
    ctx: &Ctx<P>,
    n: u32,
    reclaims: &mut ReclaimPacing,
) -> Result<(ClaimTaken, u64), courier_store::StoreError> {
    let limits = &ctx.cfg.limits;
    let started = Instant::now();
    let sent_ms = ctx.now_ms();
    let look = reclaims.look(started);
    let req = ClaimReq {
        provider: ctx.gate.name.clone(),
        owner: ctx.owner.clone(),
        n,
        lease_ttl_ms: limits.lease_ttl_ms,
        store_in_flight_max: limits.store_in_flight_max,
        mode: ctx.cfg.claim_mode,
        intents: true,
        reclaim: look,
    };
    // A claim given up is as a claim whose answer was lost: what it took
    // is reclaimed, looked up first, once its lease runs out.
    let claim = bounded(limits.lease_ttl_ms, ctx.store.action_claim(&req)).await;
    let found = claim.as_ref().map_or(0, |t| t.claimed.len());
    if let Some(ms) = claim.as_ref().ok().and_then(|t| t.provider_paused_ms) {
        learn_pause(ctx, ctx.now_ms(), ms).await;
    }
    if claim.is_ok() {
        reclaims.claimed(started, look, n as usize, found);
    }
    ctx.observe(Event::ClaimRan {
        took: started.elapsed(),
        found,
    })
    .await;
    claim.map(|c| (c, sent_ms))
}

/// A pause another worker wrote, its length `ms` measured by the database
/// and counted here from `at_ms`, when the answer came (so it ends no
/// earlier here than there): this worker keeps to it too.
async fn learn_pause<P: Provider>(ctx: &Ctx<P>, at_ms: u64, ms: u64) {
    if ctx.gate.pause(at_ms, ms, 0) {
        ctx.observe(Event::ProviderPaused { ms, shared: true })
            .await;
    }
}

/// Reads the provider's pause (a claimer with no room, which claims
/// nothing that would bring it back); a failed read is logged, and the
/// next one comes [`super::gate::REFRESH_BUSY_MS`] later.
async fn refresh_pause<P: Provider>(ctx: &Ctx<P>) {
    let Some(name) = ctx.gate.name.as_deref() else {
        return;
    };
    match bounded(ctx.cfg.limits.lease_ttl_ms, ctx.store.provider_flow(name)).await {
        Ok(flow) => {
            if let Some(ms) = flow.and_then(|f| f.paused_ms) {
                learn_pause(ctx, ctx.now_ms(), ms).await;
            }
        }
        Err(e) => {
            ctx.observe(Event::LoopCallFailed {
                call: "provider pause read",
                error: &e,
            })
            .await
        }
    }
}

/// Runs a sweep of `store_work` the claims owe, if any (it only tidies the
/// rows the next claims walk), bounded like every store call; its failure
/// is logged and costs no action anything.
async fn sweep<P: Provider>(ctx: &Ctx<P>, stores: Option<Vec<String>>) {
    let Some(stores) = stores else {
        return;
    };
    let limit_ms = ctx.cfg.limits.lease_ttl_ms;
    if let Err(e) = bounded(limit_ms, ctx.store.store_work_sweep(&stores)).await {
        ctx.observe(Event::LoopCallFailed {
            call: "store_work sweep",
            error: &e,
        })
        .await;
    }
}

/// One claim's times on the local lease clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClaimTimes {
    /// When the claim statement was sent.
    pub sent_ms: u64,
    /// The lease's end, measured from then.
    pub deadline_ms: u64,
    /// The action's deadline, measured from then.
    pub expires_ms: Option<u64>,
}

/// Holds the lease in the map the heartbeat renews, and starts the delivery.
async fn start<P: Provider>(
    ctx: &Arc<Ctx<P>>,
    tasks: &mut JoinSet<()>,
    c: Claimed,
    times: ClaimTimes,
    seed: u64,
) {
    let ClaimTimes {
        deadline_ms,
        expires_ms,
        ..
    } = times;
    ctx.observe(Event::Claimed {
        lease: &c.lease,
        reclaimed: c.reclaimed,
    })
    .await;
    let held = Arc::new(Held::new(c.lease.epoch, deadline_ms, expires_ms));
    let id = c.lease.action_id;
    ctx.held.lock().expect("held map").insert(id, held.clone());
    let ctx = ctx.clone();
    tasks.spawn(async move {
        Delivery::new(&ctx, c, &held, times.sent_ms, seed)
            .run()
            .await;
        release(&mut ctx.held.lock().expect("held map"), id, &held);
    });
}

/// Takes a finished delivery's lease out of the held map, unless the entry
/// is no longer its own: a reclaim of the same action (its lease expired,
/// a new epoch) by this worker while the old delivery was still ending has
/// put the new lease there, which the heartbeat must go on renewing.
fn release(map: &mut std::collections::HashMap<i64, Arc<Held>>, id: i64, held: &Arc<Held>) {
    if map.get(&id).is_some_and(|h| Arc::ptr_eq(h, held)) {
        map.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_finished_delivery_leaves_a_newer_lease_of_its_action_held() {
        let mut map = HashMap::new();
        let old = Arc::new(Held::new(1, 1_000, None));
        let new = Arc::new(Held::new(2, 2_000, None));
        map.insert(7, old.clone());
        // Reclaimed by this worker at epoch 2 while the epoch 1 delivery ends.
        map.insert(7, new.clone());
        release(&mut map, 7, &old);
        assert!(map.get(&7).is_some_and(|h| Arc::ptr_eq(h, &new)));
        release(&mut map, 7, &new);
        assert!(map.is_empty());
    }
}
