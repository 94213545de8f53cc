//! One claimed action's delivery in this worker: a struct whose fields are
//! everything the delivery knows, and whose methods are the steps of
//! `courier_core::step`, one per step, each returning what core decided
//! from its outcome.
//!
//! - this file: the loop, reading a previous owner's intent, abandoning;
//! - [`send`]: the local lease check, extending, counting the attempt, the request;
//! - [`lookup`]: the lookup (or, by the provider's tier, what stands for
//!   it) and its backoff;
//! - [`settle`]: settling (group commit), failing, expiring or holding the
//!   action.
//!
//! # Invariants
//! - [`Delivery::run`] performs the step core chose and nothing else: it
//!   has no branch of its own on an outcome.
//! - Once the heartbeat has cancelled `held.fenced`, no further step runs.

mod lookup;
mod send;
mod settle;

use super::context::{Ctx, Held};
use super::event::Event;
use super::Provider;
use courier_core::action_key;
use courier_core::step::{self, after_intent, FencedAt, IntentRead, Step};
use courier_core::tier::{self, Attempts};
use courier_store::{Claimed, Lease};
use rand::{rngs::StdRng, SeedableRng};

/// The life of one claimed action (mini-redis's `Handler`: one unit of
/// work, one struct, one `run`).
pub(super) struct Delivery<'a, P> {
    ctx: &'a Ctx<P>,
    /// The lease this delivery holds; every write carries its owner and epoch.
    lease: Lease,
    /// The action's idempotency key, the same at every owner and epoch;
    /// every request of this delivery carries it.
    key: String,
    to: String,
    body: String,
    /// Whether the claim wrote the intent and counted the first attempt.
    attempt_counted: bool,
    /// An attempt is counted that no request has used yet: what
    /// [`Delivery::request`] checks before a request leaves.
    unsent_attempt: bool,
    /// The local deadline and the fence signal, shared with the heartbeat.
    held: &'a Held,
    /// The provider's message id, once a send or a lookup has given it.
    message_id: Option<String>,
    /// Whether the status to settle came from a lookup (not a send answer).
    from_lookup: bool,
    /// The epoch a refused write found the action at, for the fence's report.
    found_epoch: Option<i64>,
    /// Lookups retried after unknown answers: the backoff's exponent.
    retries: u32,
    /// The times of the earlier attempts that the provider's tier decides
    /// by (the key's window, when a "not found" may be trusted).
    attempts: Attempts,
    /// This delivery's jitter (seeded by the claimer, so a seed replays it).
    rng: StdRng,
}

impl<'a, P: Provider> Delivery<'a, P> {
    /// `claim_sent_ms`: when the claim was sent, on the lease clock.
    pub fn new(
        ctx: &'a Ctx<P>,
        claimed: Claimed,
        held: &'a Held,
        claim_sent_ms: u64,
        seed: u64,
    ) -> Self {
        let limits = &ctx.cfg.limits;
        // A fresh claim counted the key's first attempt: its window starts
        // no earlier than the claim was sent (a reclaim's intent read
        // measures it again). Every request of an earlier owner left
        // before its lease ended, which was before this claim was answered.
        let attempts = Attempts {
            key_until_ms: tier::key_until_ms(
                claim_sent_ms,
                limits.key_retention_s * 1_000,
                limits.request_timeout_ms,
            ),
            not_found_trusted_from_ms: tier::not_found_trusted_from_ms(
                ctx.now_ms(),
                limits.request_timeout_ms,
                limits.lookup_lag_ms,
            ),
            // A reclaim learns it from the intent (`read_intent`); a fresh
            // claim's first request has not left yet.
            may_have_reached: false,
        };
        Delivery {
            ctx,
            key: action_key(&claimed.uid),
            lease: claimed.lease,
            to: claimed.to,
            body: claimed.body,
            attempt_counted: claimed.attempt_counted,
            unsent_attempt: claimed.attempt_counted,
            held,
            message_id: None,
            from_lookup: false,
            found_epoch: None,
            retries: 0,
            attempts,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Performs steps until one ends the delivery.
    pub async fn run(mut self) {
        let margin_ms = self.ctx.cfg.limits.send_margin_ms;
        let lease = self.lease_now();
        let mut step = step::on_claim(self.attempt_counted, lease, margin_ms);
        loop {
            step = step::unless_fenced(step, self.held.fenced.is_cancelled());
            step = match step {
                Step::ReadIntent => self.read_intent().await,
                Step::Send => self.check_lease(),
                Step::Extend(then) => self.extend(then).await,
                Step::CountAttempt => self.count_attempt().await,
                Step::Request => self.request().await,
                Step::Lookup => self.lookup().await,
                Step::RetryLookup => self.back_off().await,
                Step::Settle(status) => return self.settle(status).await,
                Step::Fail { status, reason } => return self.fail(status, &reason).await,
                Step::Expire => return self.expire().await,
                Step::Hold(reason) => return self.hold(reason).await,
                Step::Abandon(at) => return self.abandon(at).await,
            };
        }
    }

    /// A reclaim: read (fenced) the intent a previous owner wrote.
    async fn read_intent(&mut self) -> Step {
        let (ctx, lease, key) = (self.ctx, &self.lease, &self.key);
        let sent_ms = ctx.now_ms();
        let read = ctx
            .with_retry(&self.held.fenced, &mut self.rng, || {
                ctx.store.outbox_intent(lease, key)
            })
            .await;
        match read {
            None => Step::Abandon(FencedAt::Heartbeat),
            Some(Ok(i)) => {
                // The key's first attempt was counted `age_ms` before the
                // read ran, which was no earlier than it was sent.
                let limits = &ctx.cfg.limits;
                let started_ms = sent_ms.saturating_sub(i.age_ms);
                self.attempts.key_until_ms = tier::key_until_ms(
                    started_ms,
                    limits.key_retention_s * 1_000,
                    limits.request_timeout_ms,
                );
                // An earlier owner counted an attempt: its request may
                // have left.
                self.attempts.may_have_reached |= i.attempts > 0;
                after_intent(IntentRead::Held {
                    attempts: i.attempts,
                    status: i.status,
                })
            }
            Some(Err(f)) => {
                self.found_epoch = f.current_epoch;
                after_intent(IntentRead::Fenced)
            }
        }
    }

    /// The lease as measured now, as this provider's tier sees it
    /// (`courier_core::tier::lease_for`: at tier `a-`, the key's window
    /// stands as a deadline).
    fn lease_now(&self) -> courier_core::lease::LocalLease {
        tier::lease_for(
            self.ctx.cfg.tier,
            self.ctx.local_lease(self.held),
            self.attempts,
        )
    }

    /// Another owner holds the action: report it once, write nothing more.
    async fn abandon(&self, at: FencedAt) {
        self.ctx
            .observe(Event::Fenced {
                lease: &self.lease,
                at,
                current_epoch: self.found_epoch,
            })
            .await;
    }
}

#[cfg(feature = "failpoints")]
impl<P: Provider> Delivery<'_, P> {
    fn hit(&self, point: crate::failpoint::Point) -> crate::failpoint::Hit<'_> {
        crate::failpoint::Hit {
            point,
            action_id: self.lease.action_id,
            key: &self.key,
        }
    }

    async fn crash_point(&self, point: crate::failpoint::Point) {
        self.ctx.failpoints.crash_point(self.hit(point)).await;
    }

    async fn skip_lookup(&self) -> bool {
        let hit = self.hit(crate::failpoint::Point::BeforeLookup);
        self.ctx.failpoints.skip_lookup(hit).await
    }
}
