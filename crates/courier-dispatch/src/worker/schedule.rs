//! The schedule: every `schedule_tick_ms`, moves due scheduled actions to
//! pending (so a claim can take them within a tick of their `not_before`)
//! and ends unclaimed actions past their `expires_at` as expired.
//!
//! # Invariants
//! - It runs in every worker; the SQL functions skip rows another caller
//!   holds, so workers share the work and never wait for each other.
//! - It never touches a claimed action: those are their owners' to end.
//! - A tick that moved a full batch is followed by the next at once.

use super::context::{bounded, Ctx};
use super::event::Event;
use super::Provider;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The most actions one tick promotes, and the most it expires.
const TICK_MAX: i32 = 1_000;

pub(super) async fn run<P: Provider>(ctx: Arc<Ctx<P>>, shutdown: CancellationToken) {
    let every = Duration::from_millis(ctx.cfg.limits.schedule_tick_ms);
    let mut full = false;
    loop {
        if !full {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
        }
        let limit_ms = ctx.cfg.limits.lease_ttl_ms;
        let expire_max = if ctx.ignore_expiry { 0 } else { TICK_MAX };
        match bounded(limit_ms, ctx.store.schedule_tick(TICK_MAX, expire_max)).await {
            Ok(tick) => {
                full = tick.promoted >= TICK_MAX as u32 || tick.expired >= TICK_MAX as u32;
                ctx.observe(Event::ScheduleTicked { tick }).await;
            }
            Err(error) => {
                full = false;
                ctx.observe(Event::LoopCallFailed {
                    call: "schedule tick",
                    error: &error,
                })
                .await;
            }
        }
    }
}
