//! The relay's records, keys and decisions, as pure data.
//!
//! Nothing here touches etcd or NATS: the store and the broker modules
//! perform what these functions decide.
//!
//! # Key layout
//! All keys of one run live under a namespace prefix `/courier/relay/<ns>/`:
//!
//! | key                     | written by            | holds                              |
//! |-------------------------|-----------------------|------------------------------------|
//! | `task/<task_id>`        | create, apply         | the task and its state             |
//! | `idem/<request key>`    | create                | which task a request created       |
//! | `outbox/<task_id>`      | create; deleted by mark | the pending publication intent  |
//! | `published/<task_id>`   | mark                  | where the event went in the stream |
//! | `dedup/<event_id>`      | apply                 | the event's effect is committed    |
//! | `result/<task_id>`      | apply                 | the task's result                  |
//! | `counter`               | apply                 | the shared effect: sum of amounts  |
//!
//! etcd cannot write one key twice in a transaction, so the dedup record, the
//! result, the task and the counter are separate keys written together.
//!
//! # Invariants
//! - An event id is a pure function of its task id ([`event_id_for`]), fixed at
//!   create and carried unchanged through every publication and delivery.
//! - [`plan_apply`] never plans an effect for an event whose dedup record exists.
//! - The counter only grows, by exactly the event's amount per committed apply.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The header that carries the event id next to the payload. The relay never
/// sets `Nats-Msg-Id`: the consumer must be correct without broker dedup.
pub const EVENT_ID_HEADER: &str = "Courier-Event-Id";

/// Longest task id.
pub const TASK_ID_LEN_MAX: usize = 64;

/// The stable event id of a task's event.
pub fn event_id_for(task_id: &str) -> String {
    format!("evt-{task_id}")
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("task id must be 1..={TASK_ID_LEN_MAX} characters of [A-Za-z0-9_-], got {0:?}")]
    BadTaskId(String),
    #[error("namespace must be 1..=32 characters of [A-Za-z0-9_-], got {0:?}")]
    BadNamespace(String),
}

fn is_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub fn validate_task_id(task_id: &str) -> Result<(), IdError> {
    if is_name(task_id, TASK_ID_LEN_MAX) {
        Ok(())
    } else {
        Err(IdError::BadTaskId(task_id.to_string()))
    }
}

/// The keys of one namespace. A namespace separates runs that share servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
    namespace: String,
}

impl Keys {
    pub fn new(namespace: &str) -> Result<Self, IdError> {
        if !is_name(namespace, 32) {
            return Err(IdError::BadNamespace(namespace.to_string()));
        }
        Ok(Keys {
            prefix: format!("/courier/relay/{namespace}/"),
            namespace: namespace.to_string(),
        })
    }
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// Everything of this namespace.
    pub fn all(&self) -> String {
        self.prefix.clone()
    }
    pub fn task(&self, task_id: &str) -> String {
        format!("{}task/{task_id}", self.prefix)
    }
    pub fn tasks(&self) -> String {
        format!("{}task/", self.prefix)
    }
    pub fn idem(&self, request_key: &str) -> String {
        format!("{}idem/{request_key}", self.prefix)
    }
    pub fn outbox(&self, task_id: &str) -> String {
        format!("{}outbox/{task_id}", self.prefix)
    }
    pub fn outboxes(&self) -> String {
        format!("{}outbox/", self.prefix)
    }
    pub fn published(&self, task_id: &str) -> String {
        format!("{}published/{task_id}", self.prefix)
    }
    pub fn publisheds(&self) -> String {
        format!("{}published/", self.prefix)
    }
    pub fn dedup(&self, event_id: &str) -> String {
        format!("{}dedup/{event_id}", self.prefix)
    }
    pub fn dedups(&self) -> String {
        format!("{}dedup/", self.prefix)
    }
    pub fn result(&self, task_id: &str) -> String {
        format!("{}result/{task_id}", self.prefix)
    }
    pub fn results(&self) -> String {
        format!("{}result/", self.prefix)
    }
    pub fn counter(&self) -> String {
        format!("{}counter", self.prefix)
    }
}

/// A request to create a task. The idempotency key names the request: a
/// repeat with the same key returns the first task and writes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRequest {
    pub idempotency_key: String,
    pub amount: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    Pending,
    Completed,
}

/// `task/<task_id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task_id: String,
    pub event_id: String,
    pub amount: u64,
    pub state: TaskState,
}

/// `idem/<request key>`: the first answer to a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdemRecord {
    pub task_id: String,
    pub amount: u64,
}

/// `outbox/<task_id>`: a publication intent, and the event's payload on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub event_id: String,
    pub task_id: String,
    pub amount: u64,
}

/// `published/<task_id>`: written with the deletion of the outbox entry, after
/// the publish ACK (in the reference protocol).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedRecord {
    pub event_id: String,
    /// The stream sequence the ACK named; absent when the mark came first.
    pub stream_sequence: Option<u64>,
}

/// `dedup/<event_id>`: the event's effect is committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupRecord {
    pub task_id: String,
    /// Which worker committed it (for the event chain).
    pub worker: String,
}

/// `result/<task_id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultRecord {
    pub event_id: String,
    pub amount: u64,
    /// The counter as this apply left it.
    pub counter_after: u64,
}

/// The counter as read: its value and the revision a guarded write compares.
/// An absent counter reads as 0 at mod revision 0, which is what etcd
/// compares a missing key against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterRead {
    pub value: u64,
    pub mod_revision: i64,
}

/// What a worker does with a delivered event, from what it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyPlan {
    /// The dedup record exists: the effect is committed; only ACK.
    Suppress,
    /// Commit dedup + result + task + counter, if the dedup key is still absent
    /// and the counter still has `expect_mod_revision`.
    Commit {
        expect_mod_revision: i64,
        counter_after: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("counter {value} + amount {amount} overflows")]
pub struct CounterOverflow {
    pub value: u64,
    pub amount: u64,
}

/// The reference decision: suppress a known event, otherwise add its amount.
pub fn plan_apply(
    dedup_present: bool,
    counter: CounterRead,
    amount: u64,
) -> Result<ApplyPlan, CounterOverflow> {
    if dedup_present {
        return Ok(ApplyPlan::Suppress);
    }
    let counter_after = counter.value.checked_add(amount).ok_or(CounterOverflow {
        value: counter.value,
        amount,
    })?;
    debug_assert!(counter_after >= counter.value, "the counter only grows");
    Ok(ApplyPlan::Commit {
        expect_mod_revision: counter.mod_revision,
        counter_after,
    })
}

/// The protocols the lab can run. The assertions are the same for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Create atomically; publish, then mark after the ACK; commit with dedup, then ACK.
    Reference,
    /// The learner's skeleton: create and complete are left to write.
    Starter,
    /// The worker ACKs the message before it commits the effect.
    AckBeforeCommit,
    /// The worker commits the effect without the dedup record or its check.
    NoDedup,
    /// The relay marks the outbox entry published before it has the publish ACK.
    MarkBeforeAck,
}

impl Protocol {
    pub const ALL: [Protocol; 5] = [
        Protocol::Reference,
        Protocol::Starter,
        Protocol::AckBeforeCommit,
        Protocol::NoDedup,
        Protocol::MarkBeforeAck,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Reference => "reference",
            Protocol::Starter => "starter",
            Protocol::AckBeforeCommit => "ack-before-commit",
            Protocol::NoDedup => "no-dedup",
            Protocol::MarkBeforeAck => "mark-before-ack",
        }
    }

    /// The order of the relay's two steps.
    pub fn relay_order(self) -> RelayOrder {
        match self {
            Protocol::MarkBeforeAck => RelayOrder::MarkThenPublish,
            _ => RelayOrder::PublishThenMark,
        }
    }

    /// The order of the worker's two steps.
    pub fn worker_order(self) -> WorkerOrder {
        match self {
            Protocol::AckBeforeCommit => WorkerOrder::AckThenCommit,
            _ => WorkerOrder::CommitThenAck,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown protocol {0:?}: expected reference, starter, ack-before-commit, no-dedup or mark-before-ack")]
pub struct UnknownProtocol(pub String);

impl FromStr for Protocol {
    type Err = UnknownProtocol;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownProtocol(s.to_string()))
    }
}

/// The relay's two steps for one outbox entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayOrder {
    /// Publish, wait for the ACK, then mark (reference): a crash in between
    /// publishes again.
    PublishThenMark,
    /// Mark, then publish (broken): a crash in between loses the publication.
    MarkThenPublish,
}

/// The worker's two steps for one delivered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerOrder {
    /// Commit, then ACK (reference): a crash in between redelivers, and the
    /// dedup record suppresses the second effect.
    CommitThenAck,
    /// ACK, then commit (broken): a crash in between loses the task.
    AckThenCommit,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_stable_per_task() {
        assert_eq!(event_id_for("t1"), "evt-t1");
        assert_eq!(event_id_for("t1"), event_id_for("t1"));
        assert_ne!(event_id_for("t1"), event_id_for("t2"));
    }

    #[test]
    fn a_known_event_is_suppressed_and_a_new_one_adds_its_amount() {
        let c = CounterRead {
            value: 5,
            mod_revision: 42,
        };
        assert_eq!(plan_apply(true, c, 3), Ok(ApplyPlan::Suppress));
        assert_eq!(
            plan_apply(false, c, 3),
            Ok(ApplyPlan::Commit {
                expect_mod_revision: 42,
                counter_after: 8
            })
        );
        let absent = CounterRead {
            value: 0,
            mod_revision: 0,
        };
        assert_eq!(
            plan_apply(false, absent, 2),
            Ok(ApplyPlan::Commit {
                expect_mod_revision: 0,
                counter_after: 2
            })
        );
        let full = CounterRead {
            value: u64::MAX,
            mod_revision: 1,
        };
        assert!(plan_apply(false, full, 1).is_err());
        assert_eq!(plan_apply(true, full, 1), Ok(ApplyPlan::Suppress));
    }

    #[test]
    fn protocols_parse_and_order_their_steps() {
        for p in Protocol::ALL {
            assert_eq!(p.as_str().parse::<Protocol>(), Ok(p));
        }
        assert!("exactly-once".parse::<Protocol>().is_err());
        assert_eq!(
            Protocol::Reference.relay_order(),
            RelayOrder::PublishThenMark
        );
        assert_eq!(
            Protocol::MarkBeforeAck.relay_order(),
            RelayOrder::MarkThenPublish
        );
        assert_eq!(
            Protocol::Reference.worker_order(),
            WorkerOrder::CommitThenAck
        );
        assert_eq!(
            Protocol::AckBeforeCommit.worker_order(),
            WorkerOrder::AckThenCommit
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_task_id("t000001").is_ok());
        assert!(validate_task_id("").is_err());
        assert!(validate_task_id("a/b").is_err());
        assert!(validate_task_id(&"x".repeat(65)).is_err());
        assert!(Keys::new("lab-1").is_ok());
        assert!(Keys::new("a.b").is_err());
        let k = Keys::new("n1").unwrap();
        assert_eq!(k.dedup("evt-t1"), "/courier/relay/n1/dedup/evt-t1");
        assert!(k.task("t1").starts_with(&k.tasks()));
        assert!(!k.counter().starts_with(&k.tasks()));
    }
}
