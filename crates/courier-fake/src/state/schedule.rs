//! A message's life after its creation: status changes fired from the
//! timer heap as they come due (one log write per batch), and the webhook
//! queue each change fills, drained in order by one delivery task per
//! message.
//!
//! # Invariants
//! - A status only moves forward, and each change is one `status` line
//!   written before anyone can see it.
//! - An out-of-order `sent` event is held until the final one is queued.

use super::{event_id, message_id, now_at, Event, State, Timer, WebhookJob, TIMER_SLACK};
use crate::config::FakeConfig;
use crate::logfile::{Extra, LogWriteError};
use bytes::Bytes;
use courier_core::Status;
use courier_provider::wire::{LogOp, WebhookAnswer, WebhookEvent};
use std::cmp::Reverse;
use std::time::{Duration, Instant};

impl State {
    /// Queues a timer; true when the scheduler must be woken for it: it is
    /// idle, or the timer is due well before its next wake-up. Timers within
    /// [`TIMER_SLACK`] of that wake-up wait for it, which saves a wake-up per
    /// message at high send rates and delays a status change by at most that.
    pub(super) fn push_timer(&mut self, t: Timer) -> bool {
        let due = t.due;
        self.timers.push(Reverse(t));
        if self.timer_wake_at.is_none_or(|w| due + TIMER_SLACK < w) {
            self.timer_wake_at = Some(due);
            true
        } else {
            false
        }
    }

    /// The earliest pending timer.
    pub fn next_due(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse(t)| t.due)
    }

    /// Applies every status change due by `now`, logging them in one write.
    /// Returns the messages whose webhook delivery must be started.
    pub fn fire_due(&mut self, now: Instant) -> Result<Vec<u64>, LogWriteError> {
        let mut starts = Vec::new();
        let mut at: Option<String> = None;
        let mut follow_ups = Vec::new();
        while let Some(Reverse(t)) = self.timers.peek().copied() {
            if t.due > now {
                break;
            }
            self.timers.pop();
            let Some(m) = self.messages.get_mut(&t.message) else {
                continue;
            };
            let to = if t.to_final {
                m.plan.final_status
            } else {
                Status::Sent
            };
            if m.status.rank() >= to.rank() {
                continue;
            }
            debug_assert!(!m.status.is_final(), "a final status never changes");
            let at = at.get_or_insert_with(now_at).clone();
            let op = LogOp::Status {
                key: m.key.to_string(),
                message_id: message_id(t.message),
                status: to,
                is_final: to.is_final(),
            };
            self.log.stage(&at, &op, &Extra::default())?;
            m.status = to;
            m.updated_at.clone_from(&at);
            if !to.is_final() {
                follow_ups.push(Timer {
                    due: now + Duration::from_millis(m.plan.final_ms),
                    message: t.message,
                    to_final: true,
                });
            }
            if m.callback.is_some() {
                let event = Event {
                    status: to,
                    occurred_at: at,
                    attempts_done: 0,
                };
                if to == Status::Sent && m.plan.out_of_order {
                    m.held = Some(event);
                } else {
                    m.outbox.push_back(event);
                    if let Some(held) = m.held.take() {
                        m.outbox.push_back(held);
                    }
                    if !m.delivering {
                        m.delivering = true;
                        starts.push(t.message);
                    }
                }
            }
        }
        self.log.commit()?;
        for t in follow_ups {
            self.push_timer(t);
        }
        Ok(starts)
    }

    /// The next event of a message to deliver, or `None` (the message's
    /// delivery task then ends).
    pub fn next_webhook(&mut self, n: u64, cfg: &FakeConfig) -> Option<WebhookJob> {
        let m = self.messages.get_mut(&n)?;
        loop {
            let (Some(event), Some(url)) = (m.outbox.pop_front(), m.callback.clone()) else {
                m.delivering = false;
                if m.key_gone && m.settled() {
                    self.messages.remove(&n);
                }
                return None;
            };
            if event.attempts_done >= cfg.webhook_attempts_max {
                continue;
            }
            let event_id = event_id(n, event.status);
            let body = WebhookEvent {
                event_id: event_id.clone(),
                message_id: message_id(n),
                key: m.key.to_string(),
                status: event.status,
                occurred_at: event.occurred_at,
            };
            return Some(WebhookJob {
                url,
                key: m.key.clone(),
                event_id,
                status: event.status,
                body: Bytes::from(serde_json::to_vec(&body).expect("an event always encodes")),
                next_attempt: event.attempts_done + 1,
            });
        }
    }

    /// Logs one webhook attempt.
    pub fn log_webhook(
        &mut self,
        job: &WebhookJob,
        attempt: u32,
        answer: WebhookAnswer,
        extra: &Extra,
    ) -> Result<(), LogWriteError> {
        let op = LogOp::Webhook {
            key: job.key.to_string(),
            event_id: job.event_id.clone(),
            status: job.status,
            attempt,
            answer,
        };
        self.log.append(&now_at(), &op, extra).map(drop)
    }
}
