//! The send steps: the local lease check, extending a short lease, counting
//! the attempt (fenced), and the request itself.
//!
//! # Invariants
//! - The request leaves only from [`Delivery::request`], which core chooses
//!   only right after a counted attempt and a passing local lease check.
//! - The request carries the action's key; nothing here changes it.
//! - No request leaves while the provider is paused (`worker/gate.rs`):
//!   the delivery waits, then core checks its lease again.

use super::Delivery;
use crate::worker::event::Event;
use crate::worker::heartbeat::extend_one;
use crate::worker::Provider;
use courier_core::step::{self, Counted, FencedAt, Resume, Step};
use courier_provider::SendOutcome;
use courier_store::AttemptOutcome;

impl<P: Provider> Delivery<'_, P> {
    /// A send is due: the local lease check decides whether to extend first.
    pub(super) fn check_lease(&self) -> Step {
        let lease = self.lease_now();
        step::before_attempt(lease, self.ctx.cfg.limits.send_margin_ms)
    }

    /// Extends the lease now (fenced), then resumes where core said.
    pub(super) async fn extend(&mut self, then: Resume) -> Step {
        let (ctx, lease, held) = (self.ctx, &self.lease, self.held);
        let extended = ctx
            .with_retry(&held.fenced, &mut self.rng, || extend_one(ctx, lease, held))
            .await;
        match extended {
            None => Step::Abandon(FencedAt::Heartbeat),
            Some(e) => step::after_extend(then, e),
        }
    }

    /// Counts an attempt (fenced; refused when the lease ends within the
    /// margin), then lets core decide from the count and the lease as
    /// measured right after it.
    pub(super) async fn count_attempt(&mut self) -> Step {
        let (ctx, lease) = (self.ctx, &self.lease);
        let margin_ms = ctx.cfg.limits.send_margin_ms;
        let counted = ctx
            .with_retry(&self.held.fenced, &mut self.rng, || {
                ctx.store.outbox_count_attempt(lease, margin_ms)
            })
            .await;
        let counted = match counted {
            None => return Step::Abandon(FencedAt::Heartbeat),
            Some(AttemptOutcome::Counted(_attempts)) => {
                self.unsent_attempt = true;
                Counted::Counted
            }
            Some(AttemptOutcome::LeaseShort) => Counted::LeaseShort,
            Some(AttemptOutcome::Fenced(f)) => {
                self.found_epoch = f.current_epoch;
                Counted::Fenced
            }
        };
        step::after_count(counted, self.lease_now(), margin_ms)
    }

    /// The request: one send with the action's key, its answer reported,
    /// and core's decision from it.
    pub(super) async fn request(&mut self) -> Step {
        if self.wait_for_provider().await {
            // The lease was checked before the wait: core checks it again
            // (the counted attempt stays unused until a request leaves).
            return step::before_request(self.lease_now(), self.ctx.cfg.limits.send_margin_ms);
        }
        // The protocol's first rule, checked where the request leaves: no
        // request without an attempt counted (fenced) for it.
        debug_assert!(
            self.unsent_attempt,
            "action {}: a request without a counted attempt",
            self.lease.action_id
        );
        self.unsent_attempt = false;
        // Tier b: a "not found" is trusted only once this request has had
        // its time-out to land and the lookup its lag to show it.
        let limits = &self.ctx.cfg.limits;
        self.attempts.not_found_trusted_from_ms = courier_core::tier::not_found_trusted_from_ms(
            self.ctx.now_ms(),
            limits.request_timeout_ms,
            limits.lookup_lag_ms,
        );
        #[cfg(feature = "failpoints")]
        self.crash_point(crate::failpoint::Point::AfterCount).await;
        let out = self.ctx.client.send(&self.key, &self.to, &self.body).await;
        #[cfg(feature = "failpoints")]
        self.crash_point(crate::failpoint::Point::AfterSend).await;
        let answer = out.answer();
        self.ctx
            .observe(Event::Sent {
                action_id: self.lease.action_id,
                outcome: &out,
                answer: &answer,
            })
            .await;
        self.after_throttle(&out).await;
        // Only a definite answer says this request created nothing or
        // something; without one it may have reached the provider.
        if answer == courier_core::step::SendAnswer::Unknown {
            self.attempts.may_have_reached = true;
        }
        if let SendOutcome::Accepted(m) | SendOutcome::Replayed(m) = out {
            self.message_id = Some(m.id);
            self.from_lookup = false;
        }
        step::after_send(&answer)
    }

    /// Waits while the provider is paused (or until the heartbeat finds
    /// the action fenced); returns whether it waited.
    pub(super) async fn wait_for_provider(&self) -> bool {
        let ctx = self.ctx;
        ctx.gate.wait(|| ctx.now_ms(), &self.held.fenced).await
    }

    /// After a send's answer: "too many requests" pauses this worker at
    /// once and, through `provider_gates`, every worker naming the
    /// provider (`courier_core::rate::pause_ms`: its `Retry-After`, or a
    /// backoff doubling with each such answer in a row); any other answer
    /// ends the streak.
    async fn after_throttle(&self, out: &SendOutcome) {
        let ctx = self.ctx;
        let Some(throttle) = out.throttle() else {
            ctx.gate.answered();
            return;
        };
        let ms = courier_core::rate::pause_ms(throttle.retry_after_ms, ctx.gate.throttled());
        // Many deliveries meet the same 429: only a pause that grows by
        // more than a request's time-out is worth a write.
        let slack_ms = ctx.cfg.limits.request_timeout_ms;
        if !ctx.gate.pause(ctx.now_ms(), ms, slack_ms) {
            return;
        }
        ctx.observe(Event::ProviderPaused { ms, shared: false })
            .await;
        let Some(name) = ctx.gate.name.as_deref() else {
            return;
        };
        let limit_ms = ctx.cfg.limits.lease_ttl_ms;
        if let Err(e) =
            crate::worker::context::bounded(limit_ms, ctx.store.provider_pause(name, ms)).await
        {
            // This worker keeps to the pause; the others learn of it from
            // their own 429s.
            ctx.observe(Event::LoopCallFailed {
                call: "provider pause write",
                error: &e,
            })
            .await;
        }
    }
}
