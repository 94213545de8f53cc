//! The last steps: settle (the provider has the message), fail (the
//! provider refused the action), expire (the deadline passed and the
//! provider has no message) or hold (nothing can tell whether an earlier
//! attempt went out: the provider's tier, `courier_core::tier`).
//!
//! # Invariants
//! - A settle waits for the commit of the batch that holds it (group commit).
//! - A failed action is never resent, with its key or any other.

use super::Delivery;
use crate::worker::event::Event;
use crate::worker::Provider;
use courier_core::step::{FencedAt, HoldReason};
use courier_core::Status;
use courier_store::{Held, SettleOutcome, SettleReq};

impl<P: Provider> Delivery<'_, P> {
    pub(super) async fn settle(&mut self, status: Status) {
        #[cfg(feature = "failpoints")]
        self.crash_point(crate::failpoint::Point::BeforeSettle)
            .await;
        let ctx = self.ctx;
        let req = SettleReq {
            lease: self.lease.clone(),
            report: status,
            message_id: self.message_id.clone(),
            from_lookup: self.from_lookup,
        };
        let settled = ctx
            .with_retry(&self.held.fenced, &mut self.rng, || async {
                ctx.settles.call(req.clone()).await?
            })
            .await;
        match settled {
            None => self.abandon(FencedAt::Heartbeat).await,
            Some(SettleOutcome::Settled(s)) => {
                ctx.observe(Event::Settled {
                    action_id: self.lease.action_id,
                    status: s.status,
                })
                .await;
            }
            Some(SettleOutcome::Fenced(f)) => {
                self.found_epoch = f.current_epoch;
                self.abandon(FencedAt::Settle).await;
            }
        }
    }

    pub(super) async fn fail(&mut self, status: u16, reason: &str) {
        let (ctx, lease) = (self.ctx, &self.lease);
        let failed = ctx
            .with_retry(&self.held.fenced, &mut self.rng, || {
                ctx.store.action_fail(lease, status, reason)
            })
            .await;
        match failed {
            None => self.abandon(FencedAt::Heartbeat).await,
            Some(Err(f)) if f.current_epoch != Some(lease.epoch) => {
                self.found_epoch = f.current_epoch;
                self.abandon(FencedAt::Fail).await;
            }
            // Failed, or refused while the action is still at this epoch:
            // only this delivery writes at it, so the refusal is its own
            // earlier fail, committed before its answer was lost (a
            // restart, a failover).
            Some(_) => {
                ctx.observe(Event::Failed {
                    action_id: lease.action_id,
                    reason,
                })
                .await;
            }
        }
    }

    pub(super) async fn expire(&mut self) {
        let (ctx, lease) = (self.ctx, &self.lease);
        let expired = ctx
            .with_retry(&self.held.fenced, &mut self.rng, || {
                ctx.store.action_expire(lease)
            })
            .await;
        match expired {
            None => self.abandon(FencedAt::Heartbeat).await,
            Some(Err(f)) if f.current_epoch != Some(lease.epoch) => {
                self.found_epoch = f.current_epoch;
                self.abandon(FencedAt::Fail).await;
            }
            // Expired, or refused at this epoch: its own earlier write,
            // committed before its answer was lost (as for a fail).
            Some(_) => {
                ctx.observe(Event::Expired {
                    action_id: lease.action_id,
                })
                .await;
            }
        }
    }

    pub(super) async fn hold(&mut self, reason: HoldReason) {
        let (ctx, lease) = (self.ctx, &self.lease);
        let held = ctx
            .with_retry(&self.held.fenced, &mut self.rng, || {
                ctx.store.action_hold(lease, reason.as_str())
            })
            .await;
        match held {
            None => self.abandon(FencedAt::Heartbeat).await,
            Some(Err(f)) if f.current_epoch != Some(lease.epoch) => {
                self.found_epoch = f.current_epoch;
                self.abandon(FencedAt::Hold).await;
            }
            // A webhook had reported the key: evidence of a send, settled.
            Some(Ok(Held::Evidenced(status))) => {
                ctx.observe(Event::Settled {
                    action_id: lease.action_id,
                    status,
                })
                .await;
            }
            // Held, or refused at this epoch: its own earlier write,
            // committed before its answer was lost (as for a fail).
            Some(_) => {
                ctx.observe(Event::Held {
                    action_id: lease.action_id,
                    reason,
                })
                .await;
            }
        }
    }
}
