//! One place where the worker reports what happened: [`Ctx::observe`]
//! updates the worker's counters ([`super::WorkerStats`]), the Prometheus
//! counter and, for the events an operator audits later (reclaims, fences,
//! unknown send outcomes, rejections), the `events` row, together.
//!
//! # Invariants
//! - Every event is counted once, here: no loop touches a counter or writes
//!   an `events` row of its own, and the store answers a refused write as
//!   data without recording it.
//! - A failed `events` write never stops a delivery (the row is an audit
//!   trail; the protocol does not read it).

use super::context::Ctx;
use super::event::{Event, Looker};
use courier_core::step::{FencedAt, SendAnswer};
use courier_provider::{LookupOutcome, SendOutcome};
use courier_store::Lease;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn add(counter: &std::sync::atomic::AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl<P> Ctx<P> {
    pub async fn observe(&self, event: Event<'_>) {
        match event {
            Event::ClaimRan { took, found } => self.claim_ran(took, found),
            Event::Claimed { lease, reclaimed } => self.claimed(lease, reclaimed).await,
            Event::Sent {
                action_id,
                outcome,
                answer,
            } => self.sent(action_id, outcome, answer).await,
            Event::LookedUp {
                action_id,
                key,
                outcome,
                by,
            } => self.looked_up(action_id, key, outcome, by),
            Event::ProviderPaused { ms, shared } => {
                let source = if shared { "shared" } else { "answer" };
                metrics::counter!("courier_provider_pauses_total", "source" => source).increment(1);
                tracing::warn!(
                    pause_ms = ms,
                    source,
                    "the provider answered too many requests; no request leaves before the pause ends"
                );
            }
            Event::Settled { action_id, status } => {
                add(&self.stats.settled);
                metrics::counter!("courier_settled_total").increment(1);
                tracing::debug!(action = action_id, status = %status, "settled");
            }
            Event::Failed { action_id, reason } => {
                add(&self.stats.failed);
                metrics::counter!("courier_rejections_total").increment(1);
                tracing::error!(
                    action = action_id,
                    reason,
                    "provider rejected the action; marked it failed"
                );
                self.event_row("rejected", action_id, reason).await;
            }
            Event::Expired { action_id } => {
                add(&self.stats.expired);
                metrics::counter!("courier_expired_total", "by" => "worker").increment(1);
                tracing::warn!(
                    action = action_id,
                    "deadline passed with no message at the provider; marked it expired"
                );
            }
            Event::Held { action_id, reason } => {
                add(&self.stats.held_unknown);
                metrics::counter!("courier_held_unknown_total", "reason" => reason.as_str())
                    .increment(1);
                tracing::error!(
                    action = action_id,
                    reason = reason.as_str(),
                    "outcome unknown and no way to find it out: held the action as unknown \
                     for an operator (courier status lists it; courier resolve ends it)"
                );
            }
            Event::ScheduleTicked { tick } => {
                self.stats
                    .promoted
                    .fetch_add(u64::from(tick.promoted), Ordering::Relaxed);
                self.stats
                    .expired
                    .fetch_add(u64::from(tick.expired), Ordering::Relaxed);
                metrics::counter!("courier_promoted_total").increment(u64::from(tick.promoted));
                metrics::counter!("courier_expired_total", "by" => "schedule")
                    .increment(u64::from(tick.expired));
            }
            Event::Fenced {
                lease,
                at,
                current_epoch,
            } => self.fenced(lease, at, current_epoch).await,
            Event::StoreRetry { error } => {
                add(&self.stats.store_retries);
                if !error.is_unavailable() {
                    tracing::error!(error = %error, "store error");
                }
            }
            Event::LoopCallFailed { call, error } => {
                tracing::warn!(error = %error, "{call} failed");
            }
        }
    }

    fn claim_ran(&self, took: Duration, found: usize) {
        crate::metrics::claim_observed(took);
        add(&self.stats.claims);
        self.stats.claim_us_max.fetch_max(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if found == 0 {
            add(&self.stats.claims_empty);
        }
    }

    async fn claimed(&self, lease: &Lease, reclaimed: bool) {
        add(&self.stats.claimed);
        metrics::counter!("courier_claims_total").increment(1);
        if reclaimed {
            add(&self.stats.reclaimed);
            metrics::counter!("courier_reclaims_total").increment(1);
            let epoch = lease.epoch.to_string();
            self.event_row("reclaimed", lease.action_id, &epoch).await;
        }
    }

    async fn sent(&self, action_id: i64, outcome: &SendOutcome, answer: &SendAnswer) {
        add(&self.stats.sends);
        metrics::counter!("courier_sends_total", "answer" => send_label(outcome)).increment(1);
        if let SendOutcome::Unknown(why) = outcome {
            add(&self.stats.sends_unknown);
            tracing::debug!(action = action_id, why, "send outcome unknown");
            self.event_row("send_unknown", action_id, why).await;
        }
        if let SendAnswer::CredentialsRefused(error) = answer {
            tracing::error!(error, "provider refused our credentials");
        }
    }

    fn looked_up(&self, action_id: i64, key: &str, outcome: &LookupOutcome, by: Looker) {
        metrics::counter!("courier_lookups_total", "answer" => lookup_label(outcome)).increment(1);
        match (by, outcome) {
            (Looker::Delivery, LookupOutcome::Unknown(why)) => {
                tracing::debug!(action = action_id, why, "lookup unknown");
            }
            (Looker::Reconciler, LookupOutcome::Unknown(why)) => {
                tracing::debug!(why, "reconciler: lookup unknown");
            }
            (Looker::Reconciler, LookupOutcome::NotFound) => tracing::warn!(
                action = action_id,
                key,
                "reconciler: provider does not know an accepted key (lookup lag or expired retention)"
            ),
            _ => {}
        }
        if by == Looker::Delivery {
            add(&self.stats.lookups);
        }
    }

    async fn fenced(&self, lease: &Lease, at: FencedAt, current_epoch: Option<i64>) {
        add(&self.stats.fenced);
        metrics::counter!("courier_fenced_writes_total", "op" => at.as_str()).increment(1);
        tracing::info!(
            action = lease.action_id,
            epoch = lease.epoch,
            current_epoch = ?current_epoch,
            op = at.as_str(),
            "fenced: another worker holds this action; abandoning it"
        );
        self.event_row("fenced", lease.action_id, at.as_str()).await;
    }

    async fn event_row(&self, kind: &str, action_id: i64, detail: &str) {
        if let Err(e) = self.store.event_record(kind, Some(action_id), detail).await {
            tracing::debug!(error = %e, kind, "events row not written");
        }
    }
}

fn send_label(o: &SendOutcome) -> &'static str {
    match o {
        SendOutcome::Accepted(_) => "accepted",
        SendOutcome::Replayed(_) => "replayed",
        SendOutcome::Rejected { .. } => "rejected",
        SendOutcome::NotCreated { .. } => "not_created",
        SendOutcome::Throttled { .. } => "throttled",
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
