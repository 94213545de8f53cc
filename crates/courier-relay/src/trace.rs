//! The event chain: what each component did with each task, in order.
//!
//! The lab's relay and workers run in-process and append here; the report
//! prints one task's chain (publication/retry -> delivery -> commit ->
//! redelivery -> suppression -> ACK). The long run's processes do not trace.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    /// The create transaction wrote task, idempotency record and outbox entry.
    Created { idempotency_key: String },
    /// A repeat of the request returned the first task.
    CreateRepeated { idempotency_key: String },
    /// The relay stopped (a fault) just before publishing.
    RelayCrashed,
    /// JetStream acknowledged a publication at this stream sequence.
    Published { attempt: u32, stream_sequence: u64 },
    /// A publication whose ACK never arrived (the message may be stored).
    PublishUnknown { attempt: u32, reason: String },
    /// The outbox entry was marked published.
    Marked,
    /// The worker received the message; `delivery` > 1 is a redelivery.
    Delivered { delivery: u64, stream_sequence: u64 },
    /// The apply transaction committed the effect.
    Committed { counter_after: u64, conflicts: u32 },
    /// The dedup record existed: no second effect.
    Suppressed,
    /// The broker confirmed the worker's ACK.
    Acked,
    /// The worker stopped (a fault) between its two steps.
    WorkerCrashed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Milliseconds since the trace started.
    pub at_ms: u64,
    /// Which component: `creator`, `relay#1`, `worker#2`, ...
    pub actor: String,
    pub task_id: String,
    #[serde(flatten)]
    pub step: Step,
}

/// A shared, append-only trace. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Trace {
    start: Instant,
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            start: Instant::now(),
            entries: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl Trace {
    pub fn record(&self, actor: &str, task_id: &str, step: Step) {
        let entry = Entry {
            at_ms: self.start.elapsed().as_millis() as u64,
            actor: actor.to_string(),
            task_id: task_id.to_string(),
            step,
        };
        // A poisoned lock only means another recorder panicked; the entries are intact.
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry);
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// One task's chain, in order.
    pub fn chain(&self, task_id: &str) -> Vec<Entry> {
        self.entries()
            .into_iter()
            .filter(|e| e.task_id == task_id)
            .collect()
    }
}

/// Counts taken from the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceCounts {
    pub deliveries: u64,
    pub redeliveries: u64,
    pub commits: u64,
    pub suppressions: u64,
    pub acks: u64,
    pub publish_attempts: u64,
    pub publish_unknown: u64,
}

pub fn counts(entries: &[Entry]) -> TraceCounts {
    let mut c = TraceCounts::default();
    for e in entries {
        match &e.step {
            Step::Delivered { delivery, .. } => {
                c.deliveries += 1;
                if *delivery > 1 {
                    c.redeliveries += 1;
                }
            }
            Step::Committed { .. } => c.commits += 1,
            Step::Suppressed => c.suppressions += 1,
            Step::Acked => c.acks += 1,
            Step::Published { .. } => c.publish_attempts += 1,
            Step::PublishUnknown { .. } => {
                c.publish_attempts += 1;
                c.publish_unknown += 1;
            }
            _ => {}
        }
    }
    c
}

/// One line of a chain, for people.
pub fn describe(e: &Entry) -> String {
    let what = match &e.step {
        Step::Created { idempotency_key } => format!("created (request {idempotency_key}): task + idempotency record + outbox entry in one txn"),
        Step::CreateRepeated { idempotency_key } => format!("repeat of request {idempotency_key} returned the first task, wrote nothing"),
        Step::RelayCrashed => "relay crashed just before publishing (intent stays in etcd)".into(),
        Step::Published { attempt, stream_sequence } if *attempt > 1 => {
            format!("publication retry #{attempt} ACKed at stream seq {stream_sequence}")
        }
        Step::Published { stream_sequence, .. } => format!("published, ACKed at stream seq {stream_sequence}"),
        Step::PublishUnknown { attempt, reason } => format!("publication #{attempt} got no ACK ({reason}); not marked"),
        Step::Marked => "outbox entry marked published".into(),
        Step::Delivered { delivery: 1, stream_sequence } => format!("delivered (stream seq {stream_sequence})"),
        Step::Delivered { delivery, stream_sequence } => {
            format!("redelivered, delivery #{delivery} (stream seq {stream_sequence})")
        }
        Step::Committed { counter_after, conflicts } => format!(
            "committed dedup + result + task + counter (counter now {counter_after}{})",
            if *conflicts > 0 { format!(", after {conflicts} lost compares") } else { String::new() }
        ),
        Step::Suppressed => "dedup record found: suppressed, no second effect".into(),
        Step::Acked => "ACK confirmed by the broker".into(),
        Step::WorkerCrashed => "worker crashed between its two steps".into(),
    };
    format!("{:>6} ms  {:<9} {what}", e.at_ms, e.actor)
}
