//! The worker: pulls events from the durable consumer, completes each with
//! the protocol's `complete` step, and acknowledges it.
//!
//! In the reference order the ACK comes only after the commit. A worker that
//! dies in between leaves the message unacknowledged; after AckWait the
//! broker delivers it again and the next worker finds the dedup record.
//! A failed or late ACK is harmless for the same reason (an ACK that arrives
//! after AckWait may still be followed by a redelivery, nats-server #4786).
//!
//! # Invariants
//! - (reference order) A message is acknowledged only after its effect, or
//!   its dedup record, is committed in etcd.
//! - A message whose apply failed is not acknowledged: it comes back.
//! - A malformed message is terminated (`AckKind::Term`), never applied.
//! - After an ACK the broker did not confirm, the rest of the batch is left
//!   unacknowledged (it comes back after AckWait) and the worker pulls anew:
//!   a lost server costs one ACK time-out, not one per message held.
//! - A pull unanswered for its expiry plus [`PULL_GRACE_MS`] is given up and
//!   made again (to whichever server now leads the consumer).
//! - Fault hooks exist only as a constructor argument ([`WorkerFault`]).

use crate::broker::{parse_event, Broker, BrokerError};
use crate::events::{EventKind, EventLog};
use crate::limits::RelayLimits;
use crate::model::{Protocol, WorkerOrder};
use crate::protocol::{self, Applied, ApplyError};
use crate::store::{Store, StoreError};
use crate::trace::{Step, Trace};
use async_nats::jetstream::AckKind;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A fault the lab injects into one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerFault {
    /// Exit after the first step for the first message (reference: after the
    /// commit, before the ACK).
    ExitAfterFirstStep,
}

/// How long past a pull's expiry the worker waits for its answer before it
/// pulls again (async-nats alone would wait 5 s more).
const PULL_GRACE_MS: u64 = 1_000;

/// What the worker does after one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The next message of the batch.
    Message,
    /// An ACK went unconfirmed: the server (or the consumer's leader) may be
    /// gone, so the rest of the batch is left to come back after AckWait
    /// rather than costing one ACK time-out each; a new pull follows.
    Pull,
    Exit(WorkerExit),
}

/// How a worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerExit {
    Stopped,
    /// The fault hook fired.
    Crashed,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The protocol's step failed in a way a retry will not fix.
    #[error("worker {worker}: {source}")]
    Step {
        worker: String,
        #[source]
        source: ApplyError,
    },
}

/// Counts one worker keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub deliveries: u64,
    pub redeliveries: u64,
    pub commits: u64,
    pub suppressions: u64,
    pub conflicts: u64,
    pub acks: u64,
    pub ack_failures: u64,
    pub apply_failures: u64,
    pub terminated: u64,
}

pub struct Worker {
    store: Store,
    broker: Broker,
    protocol: Protocol,
    limits: RelayLimits,
    name: String,
    trace: Option<Trace>,
    fault: Option<WorkerFault>,
    rng: StdRng,
    events: Option<EventLog>,
    pub stats: WorkerStats,
}

fn is_fatal(e: &ApplyError) -> bool {
    match e {
        ApplyError::NotWritten { .. } | ApplyError::Overflow(_) => true,
        ApplyError::Store(s) => !matches!(s, StoreError::Unknown(_)),
        ApplyError::Contended { .. } => false,
    }
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        broker: Broker,
        protocol: Protocol,
        limits: RelayLimits,
        name: &str,
        trace: Option<Trace>,
        fault: Option<WorkerFault>,
        seed: u64,
    ) -> Self {
        Worker {
            store,
            broker,
            protocol,
            limits,
            name: name.to_string(),
            trace,
            fault,
            rng: StdRng::seed_from_u64(seed),
            events: None,
            stats: WorkerStats::default(),
        }
    }

    /// Appends every commit, suppression and redelivery to `log` (the long
    /// run's figures; nothing reads it back to decide anything).
    pub fn with_events(mut self, log: EventLog) -> Self {
        self.events = Some(log);
        self
    }

    fn event(&self, kind: EventKind) {
        if let Some(log) = &self.events {
            log.record(kind);
        }
    }

    fn record(&self, task_id: &str, step: Step) {
        if let Some(t) = &self.trace {
            t.record(&self.name, task_id, step);
        }
    }

    /// The commit step; `Ok(false)` means the message stays unacknowledged.
    async fn commit(&mut self, event: &crate::model::Event) -> Result<bool, WorkerError> {
        let r = protocol::complete(
            self.protocol,
            &self.store,
            event,
            &self.name,
            &self.limits,
            &mut self.rng,
        )
        .await;
        match r {
            Ok(Applied::Committed {
                counter_after,
                conflicts,
            }) => {
                self.stats.commits += 1;
                self.event(EventKind::Commit);
                self.stats.conflicts += u64::from(conflicts);
                self.record(
                    &event.task_id,
                    Step::Committed {
                        counter_after,
                        conflicts,
                    },
                );
                Ok(true)
            }
            Ok(Applied::Suppressed { conflicts }) => {
                self.stats.suppressions += 1;
                self.event(EventKind::Suppress);
                self.stats.conflicts += u64::from(conflicts);
                self.record(&event.task_id, Step::Suppressed);
                Ok(true)
            }
            Err(e) if is_fatal(&e) => Err(WorkerError::Step {
                worker: self.name.clone(),
                source: e,
            }),
            Err(e) => {
                self.stats.apply_failures += 1;
                tracing::warn!(worker = %self.name, error = %e, "apply failed; the message comes back after AckWait");
                Ok(false)
            }
        }
    }

    /// Acknowledges and waits for the broker's confirmation; `false` when
    /// none came.
    async fn ack(&mut self, msg: &async_nats::jetstream::Message, task_id: &str) -> bool {
        match msg.double_ack().await {
            Ok(()) => {
                self.stats.acks += 1;
                self.record(task_id, Step::Acked);
                true
            }
            Err(e) => {
                // The message may come back; its dedup record makes that harmless.
                self.stats.ack_failures += 1;
                tracing::warn!(worker = %self.name, error = %e, "ACK not confirmed");
                false
            }
        }
    }

    /// Pulls and completes events until `stop`, or until the fault hook fires.
    pub async fn run(&mut self, stop: CancellationToken) -> Result<WorkerExit, WorkerError> {
        let retry = Duration::from_millis(self.limits.relay_idle_ms.max(50));
        let mut consumer = None;
        while !stop.is_cancelled() {
            let c = match &consumer {
                Some(c) => c,
                None => match self.broker.consumer().await {
                    Ok(c) => consumer.insert(c),
                    Err(e) => {
                        self.pause_after(&e, &stop, retry).await;
                        continue;
                    }
                },
            };
            let batch = c
                .batch()
                .max_messages(self.limits.fetch_batch_max as usize)
                .expires(Duration::from_millis(self.limits.fetch_expires_ms))
                .messages()
                .await;
            let mut batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    consumer = None;
                    let e = BrokerError::Request {
                        what: "pull",
                        reason: e.to_string(),
                    };
                    self.pause_after(&e, &stop, retry).await;
                    continue;
                }
            };
            // A live consumer leader answers a pull within its expiry (with
            // messages, or a time-out status); silence past it means the
            // request went to a server that is gone, so pull anew.
            let silence = Duration::from_millis(self.limits.fetch_expires_ms + PULL_GRACE_MS);
            loop {
                let next = tokio::select! {
                    _ = stop.cancelled() => return Ok(WorkerExit::Stopped),
                    next = tokio::time::timeout(silence, batch.next()) => next,
                };
                let msg = match next {
                    Err(_) | Ok(None) => break,
                    Ok(Some(Ok(m))) => m,
                    Ok(Some(Err(e))) => {
                        tracing::debug!(worker = %self.name, error = %e, "pull ended");
                        break;
                    }
                };
                match self.handle(msg).await? {
                    Next::Message => {}
                    Next::Pull => break,
                    Next::Exit(exit) => return Ok(exit),
                }
            }
        }
        Ok(WorkerExit::Stopped)
    }

    async fn pause_after(&self, e: &BrokerError, stop: &CancellationToken, d: Duration) {
        tracing::warn!(worker = %self.name, error = %e, "broker unavailable; retrying");
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(d) => {}
        }
    }

    /// Handles one message, and says what comes next.
    async fn handle(&mut self, msg: async_nats::jetstream::Message) -> Result<Next, WorkerError> {
        let (delivery, stream_sequence) = match msg.info() {
            Ok(i) => (i.delivered as u64, i.stream_sequence),
            Err(_) => (1, 0),
        };
        let event = match parse_event(msg.headers.as_ref(), &msg.payload, &self.limits) {
            Ok(e) => e,
            Err(reason) => {
                self.stats.terminated += 1;
                tracing::warn!(worker = %self.name, %reason, "malformed message terminated");
                let _ = msg.ack_with(AckKind::Term).await;
                return Ok(Next::Message);
            }
        };
        self.stats.deliveries += 1;
        if delivery > 1 {
            self.stats.redeliveries += 1;
            self.event(EventKind::Redelivery);
        }
        self.record(
            &event.task_id,
            Step::Delivered {
                delivery,
                stream_sequence,
            },
        );
        let crash = self.fault.take().is_some();
        let acked = match self.protocol.worker_order() {
            WorkerOrder::CommitThenAck => {
                if !self.commit(&event).await? {
                    return Ok(Next::Message);
                }
                if crash {
                    self.record(&event.task_id, Step::WorkerCrashed);
                    return Ok(Next::Exit(WorkerExit::Crashed));
                }
                self.ack(&msg, &event.task_id).await
            }
            WorkerOrder::AckThenCommit => {
                let acked = self.ack(&msg, &event.task_id).await;
                if crash {
                    self.record(&event.task_id, Step::WorkerCrashed);
                    return Ok(Next::Exit(WorkerExit::Crashed));
                }
                self.commit(&event).await?;
                acked
            }
        };
        Ok(if acked { Next::Message } else { Next::Pull })
    }
}
