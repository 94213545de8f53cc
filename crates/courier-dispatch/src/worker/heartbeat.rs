//! The heartbeat: extends every lease this process holds, in one fenced
//! statement, and cancels the deliveries found fenced. It keeps running
//! through shutdown, while the actions in hand finish, and is stopped by
//! [`super::Worker::run`] after the last of them.
//!
//! # Invariants
//! - The heartbeat never waits for a row lock (the statement skips locked
//!   rows); a lease it skipped is renewed by the next beat, or by
//!   [`extend_one`] before a send.
//! - A renewal moves the local deadline from the moment it was sent.
//! - A beat that fails is reported through `Ctx::observe`, as every event of
//!   the worker is; the next beat tries again.

use super::context::{bounded, Ctx, Held};
use super::event::Event;
use super::Provider;
use courier_core::step::Extended;
use courier_store::{Lease, StoreError};
use std::sync::Arc;
use std::time::Duration;

pub(super) async fn run<P: Provider>(ctx: Arc<Ctx<P>>) {
    let interval = Duration::from_millis(ctx.cfg.limits.heartbeat_interval_ms);
    loop {
        tokio::time::sleep(interval).await;
        beat(&ctx).await;
    }
}

async fn beat<P: Provider>(ctx: &Ctx<P>) {
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
    let ttl = ctx.cfg.limits.lease_ttl_ms;
    let sent_ms = ctx.now_ms();
    match bounded(ttl, ctx.store.action_heartbeat(&ctx.owner, &held, ttl)).await {
        Ok(beat) => {
            let map = ctx.held.lock().expect("held map");
            for id in &beat.held {
                if let Some(h) = map.get(id) {
                    h.renewed(sent_ms, ttl);
                }
            }
            for id in &beat.fenced {
                if let Some(h) = map.get(id) {
                    // Another worker holds it at a newer epoch; the delivery
                    // stops at its next step and reports the fence.
                    h.fenced.cancel();
                }
            }
        }
        Err(e) => {
            ctx.observe(Event::LoopCallFailed {
                call: "heartbeat",
                error: &e,
            })
            .await
        }
    }
}

/// Extends one lease now (before a send, when it is short).
/// `Lost` when the action is fenced, or its row stayed locked (by a claimer
/// re-checking an expired lease) for a second: the heartbeat never waits for
/// a lock, so a row locked at that moment is asked about again.
pub(super) async fn extend_one<P: Provider>(
    ctx: &Ctx<P>,
    lease: &Lease,
    held: &Held,
) -> Result<Extended, StoreError> {
    const LOCKED_RETRIES: u32 = 50;
    let ttl = ctx.cfg.limits.lease_ttl_ms;
    for _ in 0..LOCKED_RETRIES {
        let sent_ms = ctx.now_ms();
        let beat = ctx
            .store
            .action_heartbeat(&ctx.owner, &[(lease.action_id, lease.epoch)], ttl)
            .await?;
        if beat.held.contains(&lease.action_id) {
            held.renewed(sent_ms, ttl);
            return Ok(Extended::Held);
        }
        if beat.fenced.contains(&lease.action_id) {
            return Ok(Extended::Lost);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Extended::Lost)
}
