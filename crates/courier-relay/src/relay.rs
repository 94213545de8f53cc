//! The relay: reads pending outbox entries from etcd, publishes each to
//! JetStream, and marks it published only after the publish ACK.
//!
//! A crash between the ACK and the mark means the entry is published again by
//! the next pass: the stream may hold several copies of one event, all with
//! the same event id, and the consumer's dedup record makes the effect single.
//!
//! # Invariants
//! - (reference order) An outbox entry is deleted only together with writing
//!   its published record, and only for publications JetStream acknowledged.
//! - An entry whose publication is unknown stays pending and is published again.
//! - One pass waits at most `publish_ack_timeout_ms` for its ACKs, however
//!   many entries it published: they are awaited together, not in turn.
//! - Fault hooks exist only as a constructor argument ([`RelayFault`]); nothing
//!   read from the network can switch one on.

use crate::broker::{Broker, PublishOutcome};
use crate::limits::RelayLimits;
use crate::model::{Event, RelayOrder};
use crate::store::{Store, StoreError};
use crate::trace::{Step, Trace};
use futures::future::join_all;
use std::collections::HashMap;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A fault the lab injects into one relay pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayFault {
    /// Stop immediately before publishing: etcd keeps the intents, the stream
    /// stays empty.
    CrashBeforePublish,
    /// Publish the first entry with a reply inbox nobody listens on: the
    /// stream stores it, the relay never sees the ACK and does not mark it.
    LoseFirstPublishAck,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    pub read: u32,
    pub acked: u32,
    pub unknown: u32,
    pub marked: u32,
    pub crashed: bool,
}

pub struct Relay {
    store: Store,
    broker: Broker,
    order: RelayOrder,
    limits: RelayLimits,
    name: String,
    trace: Option<Trace>,
    fault: Option<RelayFault>,
    /// Publications per task by this relay, for the trace.
    attempts: HashMap<String, u32>,
}

impl Relay {
    pub fn new(
        store: Store,
        broker: Broker,
        order: RelayOrder,
        limits: RelayLimits,
        name: &str,
        trace: Option<Trace>,
        fault: Option<RelayFault>,
    ) -> Self {
        Relay {
            store,
            broker,
            order,
            limits,
            name: name.to_string(),
            trace,
            fault,
            attempts: HashMap::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn record(&self, task_id: &str, step: Step) {
        if let Some(t) = &self.trace {
            t.record(&self.name, task_id, step);
        }
    }

    fn next_attempt(&mut self, task_id: &str) -> u32 {
        let n = self.attempts.entry(task_id.to_string()).or_default();
        *n += 1;
        *n
    }

    /// Publishes every entry, then collects the ACKs: many publications in
    /// flight. The ACKs are awaited together, each within
    /// `publish_ack_timeout_ms` of the same moment: a server that swallowed
    /// the whole pass (stopped, its socket still open) costs one time-out,
    /// not one per entry.
    async fn publish_all(&mut self, entries: &[Event]) -> Vec<PublishOutcome> {
        let mut lost_ack = None;
        let mut started = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            if i == 0 && self.fault == Some(RelayFault::LoseFirstPublishAck) {
                self.fault = None;
                lost_ack = Some(self.broker.publish_losing_ack(e).await);
            } else {
                started.push(self.broker.publish_start(e).await);
            }
        }
        let mut outcomes = Vec::with_capacity(entries.len());
        outcomes.extend(lost_ack);
        let broker = &self.broker;
        outcomes.extend(join_all(started.into_iter().map(|s| broker.publish_finish(s))).await);
        outcomes
    }

    /// One pass over the pending outbox entries.
    pub async fn pass(&mut self) -> Result<Pass, StoreError> {
        let entries = self
            .store
            .outbox_pending(self.limits.outbox_scan_max)
            .await?;
        let mut pass = Pass {
            read: entries.len() as u32,
            ..Pass::default()
        };
        if entries.is_empty() {
            return Ok(pass);
        }
        if self.order == RelayOrder::MarkThenPublish {
            // Broken order: the intent is gone before the stream has the event.
            let marks: Vec<(Event, Option<u64>)> =
                entries.iter().map(|e| (e.clone(), None)).collect();
            self.store
                .outbox_mark_published(&marks, self.limits.mark_batch_max)
                .await?;
            pass.marked = marks.len() as u32;
            for e in &entries {
                self.record(&e.task_id, Step::Marked);
            }
        }
        if self.fault == Some(RelayFault::CrashBeforePublish) {
            self.fault = None;
            self.record(&entries[0].task_id, Step::RelayCrashed);
            pass.crashed = true;
            return Ok(pass);
        }

        let outcomes = self.publish_all(&entries).await;

        let mut acked = Vec::new();
        for (e, outcome) in entries.iter().zip(outcomes) {
            let attempt = self.next_attempt(&e.task_id);
            match outcome {
                PublishOutcome::Acked { stream_sequence } => {
                    pass.acked += 1;
                    self.record(
                        &e.task_id,
                        Step::Published {
                            attempt,
                            stream_sequence,
                        },
                    );
                    acked.push((e.clone(), Some(stream_sequence)));
                }
                PublishOutcome::Unknown(reason) => {
                    pass.unknown += 1;
                    tracing::debug!(task = %e.task_id, %reason, "publication unknown; the entry stays pending");
                    self.record(&e.task_id, Step::PublishUnknown { attempt, reason });
                }
            }
        }
        if self.order == RelayOrder::PublishThenMark && !acked.is_empty() {
            self.store
                .outbox_mark_published(&acked, self.limits.mark_batch_max)
                .await?;
            pass.marked = acked.len() as u32;
            for (e, _) in &acked {
                self.record(&e.task_id, Step::Marked);
            }
        }
        Ok(pass)
    }

    /// Passes until `stop`, pausing while the outbox is empty. Unknown etcd
    /// outcomes are retried; anything else ends the relay.
    pub async fn run(&mut self, stop: CancellationToken) -> Result<(), StoreError> {
        let idle = Duration::from_millis(self.limits.relay_idle_ms);
        let mut failures = 0u32;
        while !stop.is_cancelled() {
            let pause = match self.pass().await {
                Ok(p) if p.crashed => return Ok(()),
                Ok(p) => {
                    failures = 0;
                    if p.read == 0 || p.unknown == p.read {
                        idle
                    } else {
                        Duration::ZERO
                    }
                }
                Err(e) if e.is_unknown() => {
                    failures += 1;
                    tracing::warn!(relay = %self.name, error = %e, "relay pass failed; retrying");
                    idle * failures.min(25)
                }
                Err(e) => return Err(e),
            };
            if !pause.is_zero() {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
        Ok(())
    }
}
