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
//!   claims' sweeps as one statement: at most [`SWEEP_WAIT_MAX`], until
//!   [`SWEEP_STORES_MAX`] stores are owed, or until the claimer waits for
//!   room or stops (checked after every claim; an idle claimer claims
//!   every poll interval); a sweep held back holds no connection. A sweep
//!   ends (or is given up after a lease time) before the claim after it.

use super::context::{bounded, Ctx, Held};
use super::delivery::Delivery;
use super::event::Event;
use super::Provider;
use courier_core::backoff::{idle_wait_ms, store_retry_delay_ms};
use courier_core::lease::deadline_ms;
use courier_store::{ClaimTaken, Claimed, SweepOwed};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A sweep may wait this long for later claims' sweeps to run with them.
/// Until it runs, the stores it owes stay in `store_work` (a claim walks
/// past a store without work at the cost of one probe, and an enqueue for
/// it finds its row in place).
pub const SWEEP_WAIT_MAX: Duration = Duration::from_millis(20);
/// A sweep held back runs once it owes this many stores.
pub const SWEEP_STORES_MAX: usize = 32;

/// The sweep held back, and since when.
type Owed = Option<(SweepOwed, Instant)>;

pub(super) async fn run<P: Provider>(ctx: Arc<Ctx<P>>, shutdown: CancellationToken) {
    let limits = &ctx.cfg.limits;
    let mut tasks = JoinSet::new();
    let mut rng = StdRng::seed_from_u64(ctx.cfg.seed);
    let mut store_retry = 0u32;
    let mut owed: Owed = None;
    while !shutdown.is_cancelled() {
        while tasks.try_join_next().is_some() {}
        let room = limits.worker_concurrency_max as usize - tasks.len();
        if room == 0 {
            // About to wait for room: the sweep held back runs now.
            sweep_owed(&ctx, &mut owed).await;
            tokio::select! {
                _ = tasks.join_next() => {}
                _ = shutdown.cancelled() => break,
            }
            continue;
        }
        let n = room.min(limits.claim_batch_max as usize) as u32;
        // How long to wait before the next claim, and whether the end of a
        // delivery cuts the wait short (only when idle, not after a failure).
        let (wait_ms, idle) = match claim(&ctx, n).await {
            Ok((taken, _)) if taken.claimed.is_empty() => {
                store_retry = 0;
                owe(&mut owed, taken.sweep);
                sweep_if_due(&ctx, &mut owed).await;
                (idle_wait_ms(ctx.cfg.idle_poll_ms, &mut rng), true)
            }
            Ok((taken, sent_ms)) => {
                store_retry = 0;
                let full = taken.claimed.len() >= n as usize;
                let deadline = deadline_ms(sent_ms, limits.lease_ttl_ms);
                for c in taken.claimed {
                    start(&ctx, &mut tasks, c, deadline, rng.random()).await;
                }
                // The deliveries are under way; now the sweep the claim owes,
                // or later, with the next claims' sweeps.
                owe(&mut owed, taken.sweep);
                sweep_if_due(&ctx, &mut owed).await;
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
    sweep_owed(&ctx, &mut owed).await;
    // Let the actions in hand finish: abandoning them would only delay them
    // by a lease, but finishing is cleaner.
    while tasks.join_next().await.is_some() {}
}

/// Runs the sweep held back once it owes [`SWEEP_STORES_MAX`] stores or
/// has waited [`SWEEP_WAIT_MAX`] (an idle claimer asks again within its
/// poll interval, so it runs at most one poll late).
async fn sweep_if_due<P: Provider>(ctx: &Ctx<P>, owed: &mut Owed) {
    let due = owed.as_ref().is_some_and(|(s, since)| {
        s.stores().len() >= SWEEP_STORES_MAX || since.elapsed() >= SWEEP_WAIT_MAX
    });
    if due {
        sweep_owed(ctx, owed).await;
    }
}

/// Runs the sweep held back, if any.
async fn sweep_owed<P: Provider>(ctx: &Ctx<P>, owed: &mut Owed) {
    if let Some((s, _)) = owed.take() {
        sweep(ctx, s).await;
    }
}

/// Adds a claim's sweep to the one held back (if it owes anything), giving
/// its connection back to the pool.
fn owe(owed: &mut Owed, mut more: SweepOwed) {
    if more.stores().is_empty() {
        return;
    }
    match owed {
        Some((s, _)) => s.absorb(more),
        None => {
            more.release_connection();
            *owed = Some((more, Instant::now()));
        }
    }
}

/// One claim statement; also returns when it was sent, on the lease clock.
/// The sweep it owes is the caller's to run.
async fn claim<P: Provider>(
    ctx: &Ctx<P>,
    n: u32,
) -> Result<(ClaimTaken, u64), courier_store::StoreError> {
    let limits = &ctx.cfg.limits;
    let started = Instant::now();
    let sent_ms = ctx.now_ms();
    let claim = ctx.store.action_claim_to_send_sweep_after(
        &ctx.owner,
        n,
        limits.lease_ttl_ms,
        limits.store_in_flight_max,
        ctx.cfg.claim_mode,
    );
    // A claim given up is as a claim whose answer was lost: what it took
    // is reclaimed, looked up first, once its lease runs out.
    let claim = bounded(limits.lease_ttl_ms, claim).await;
    let found = claim.as_ref().map_or(0, |t| t.claimed.len());
    ctx.observe(Event::ClaimRan {
        took: started.elapsed(),
        found,
    })
    .await;
    claim.map(|c| (c, sent_ms))
}

/// Runs the sweep of `store_work` a claim owes (it only tidies the rows the
/// next claims walk), bounded like every store call; its failure is logged
/// by the store and costs no action anything.
async fn sweep<P: Provider>(ctx: &Ctx<P>, owed: SweepOwed) {
    let limit_ms = ctx.cfg.limits.lease_ttl_ms;
    let _ = bounded(limit_ms, async {
        owed.run().await;
        Ok(())
    })
    .await;
}

/// Holds the lease in the map the heartbeat renews, and starts the delivery.
async fn start<P: Provider>(
    ctx: &Arc<Ctx<P>>,
    tasks: &mut JoinSet<()>,
    c: Claimed,
    deadline_ms: u64,
    seed: u64,
) {
    ctx.observe(Event::Claimed {
        lease: &c.lease,
        reclaimed: c.reclaimed,
    })
    .await;
    let held = Arc::new(Held::new(c.lease.epoch, deadline_ms));
    let id = c.lease.action_id;
    ctx.held.lock().expect("held map").insert(id, held.clone());
    let ctx = ctx.clone();
    tasks.spawn(async move {
        Delivery::new(&ctx, c, &held, seed).run().await;
        ctx.held.lock().expect("held map").remove(&id);
    });
}
