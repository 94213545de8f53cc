//! The reconciler: looks up actions whose final status is overdue (or in
//! conflict) and merges what the provider says; reports intents older than
//! the alert threshold.
//!
//! # Invariants
//! - It only reads the provider and merges forward; it never sends.
//! - At a tier without a lookup (`courier_core::Tier::has_lookup`) it asks
//!   the provider nothing: statuses come from webhooks alone, and only the
//!   age of open intents is reported.
//! - While the provider is paused (`gate.rs`) it asks nothing either.

use super::context::Ctx;
use super::event::{Event, Looker};
use super::Provider;
use courier_provider::LookupOutcome;
use courier_store::{DueCheck, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the reconciler asks for due checks, and how many at once.
const POLL: Duration = Duration::from_millis(250);
const DUE_CHECKS_MAX: u32 = 32;
/// How often open intents are counted against the alert threshold.
const AGE_CHECK_EVERY: Duration = Duration::from_secs(10);

pub(super) async fn run<P: Provider>(ctx: Arc<Ctx<P>>, shutdown: CancellationToken) {
    let mut last_age_check: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = shutdown.cancelled() => return,
        }
        let overdue_ms = ctx.cfg.limits.final_overdue_ms;
        let paused = ctx.gate.remaining_ms(ctx.now_ms()).is_some();
        if ctx.cfg.tier.has_lookup() && !paused {
            if let Err(e) = check_due(&ctx, overdue_ms).await {
                tracing::warn!(error = %e, "reconciler: cannot read due checks");
                continue;
            }
        }
        if last_age_check.is_none_or(|t| t.elapsed() > AGE_CHECK_EVERY) {
            last_age_check = Some(Instant::now());
            count_old_intents(&ctx).await;
        }
    }
}

/// The due checks of one turn, looked up at once.
async fn check_due<P: Provider>(ctx: &Ctx<P>, overdue_ms: u64) -> Result<(), StoreError> {
    let due = ctx
        .store
        .outbox_due_checks(DUE_CHECKS_MAX, overdue_ms)
        .await?;
    futures::future::join_all(due.into_iter().map(|d| check(ctx, d))).await;
    Ok(())
}

/// One due check: look the key up and merge a found status.
async fn check<P: Provider>(ctx: &Ctx<P>, d: DueCheck) {
    let out = ctx.client.lookup(&d.key).await;
    ctx.observe(Event::LookedUp {
        action_id: d.action_id,
        key: &d.key,
        outcome: &out,
        by: Looker::Reconciler,
    })
    .await;
    if let LookupOutcome::Found(m) = out {
        if let Err(e) = ctx.store.lookup_merge(&d.key, m.status, &m.id).await {
            tracing::warn!(error = %e, "reconciler: merge failed");
        }
    }
}

async fn count_old_intents<P: Provider>(ctx: &Ctx<P>) {
    let threshold_s = ctx.cfg.limits.intent_age_alert_s();
    match ctx.store.intents_older_than(threshold_s).await {
        Ok(n) => {
            metrics::gauge!("courier_intents_older_than_alert").set(n as f64);
            if n > 0 {
                tracing::warn!(
                    count = n,
                    threshold_s,
                    "open intents older than the alert threshold: past the provider's key retention a resend could be a second message"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "reconciler: cannot count old intents"),
    }
}
