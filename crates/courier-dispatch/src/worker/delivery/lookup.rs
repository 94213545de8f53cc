//! The lookup steps: find out what became of the earlier attempts (ask the
//! provider about the key, or what the provider's tier has instead:
//! `courier_core::tier::find_out`), and wait (capped, jittered backoff)
//! before asking again after an unknown answer.
//!
//! # Invariants
//! - Only a definite "not found" leads to a send (core's `after_lookup`),
//!   at tier `b` only once it may be trusted; tiers without a lookup send
//!   again only as `tier::find_out` allows.
//! - A backoff ends early when the heartbeat finds the action fenced.

use super::Delivery;
use crate::worker::event::{Event, Looker};
use crate::worker::Provider;
use courier_core::backoff::delay_ms;
use courier_core::step::Step;
use courier_core::tier::{self, FindOut};
use courier_provider::LookupOutcome;
use std::time::Duration;

impl<P: Provider> Delivery<'_, P> {
    pub(super) async fn lookup(&mut self) -> Step {
        let lease = self.lease_now();
        let margin_ms = self.ctx.cfg.limits.send_margin_ms;
        if let FindOut::Instead(step) =
            tier::find_out(self.ctx.cfg.tier, self.attempts, lease, margin_ms)
        {
            return step;
        }
        #[cfg(feature = "failpoints")]
        if self.skip_lookup().await {
            // The negative control of the failpoint test only: act as if the
            // provider had answered "not found", without asking it.
            let answer = courier_core::step::LookupAnswer::NotFound;
            return self.after_lookup(&answer);
        }
        // A lookup is a request too: none while the provider is paused.
        // The lease may have run short meanwhile; a lookup needs none.
        self.wait_for_provider().await;
        let out = self.ctx.client.lookup(&self.key).await;
        self.ctx
            .observe(Event::LookedUp {
                action_id: self.lease.action_id,
                key: &self.key,
                outcome: &out,
                by: Looker::Delivery,
            })
            .await;
        let answer = out.answer();
        if let LookupOutcome::Found(m) = out {
            self.message_id = Some(m.id);
            self.from_lookup = true;
        }
        self.after_lookup(&answer)
    }

    /// Core's decision from a lookup's answer, the lease and the deadline
    /// as measured now. A "not found" past the deadline is trusted once a
    /// request's time-out and the provider's lookup lag have passed since
    /// (and at tier `b`, once they have since the last request).
    fn after_lookup(&self, answer: &courier_core::step::LookupAnswer) -> Step {
        let limits = &self.ctx.cfg.limits;
        tier::after_lookup(
            self.ctx.cfg.tier,
            answer,
            self.attempts,
            self.lease_now(),
            limits.send_margin_ms,
            limits.request_timeout_ms + limits.lookup_lag_ms,
        )
    }

    pub(super) async fn back_off(&mut self) -> Step {
        let limits = &self.ctx.cfg.limits;
        let wait = delay_ms(
            self.retries,
            limits.backoff_base_ms,
            limits.backoff_cap_ms,
            &mut self.rng,
        );
        self.retries += 1;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            _ = self.held.fenced.cancelled() => {}
        }
        courier_core::step::after_backoff()
    }
}
