//! What the two steps of a protocol answer: [`Created`] or a [`CreateError`]
//! for `create`, [`Applied`] or an [`ApplyError`] for `complete`. Every
//! protocol (reference, starter, broken) returns these; [`crate::protocol`]
//! chooses which protocol runs, so this module imports none of them.

use crate::model::CounterOverflow;
use crate::store::StoreError;

/// What a create answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub task_id: String,
    pub event_id: String,
    /// False when the request was a repeat and the first task was returned.
    pub created: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The request is malformed: do not retry it.
    #[error("bad create request: {0}")]
    BadRequest(String),
    /// The key was first used with another amount: do not retry it.
    #[error("idempotency key {key:?} was first used for task {first_task_id} with amount {first_amount}, not {amount}")]
    KeyReused {
        key: String,
        first_task_id: String,
        first_amount: u64,
        amount: u64,
    },
    /// Another request holds this task id: retry with a new id.
    #[error("task id {0} already belongs to another request")]
    TaskIdTaken(String),
    /// etcd failed; an `Unknown` outcome may be retried with the same key and task id.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The learner's step is not written yet.
    #[error("the `{step}` step is not written yet: {hint}")]
    NotWritten {
        step: &'static str,
        hint: &'static str,
    },
}

/// What applying an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The effect was committed now, by this worker.
    Committed { counter_after: u64, conflicts: u32 },
    /// The dedup record existed (or appeared while retrying): no second effect.
    Suppressed { conflicts: u32 },
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// etcd failed past the retry budget: leave the message unacknowledged,
    /// it comes back after AckWait.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Every attempt lost its compare to another worker: leave the message
    /// unacknowledged.
    #[error("apply of {event_id} lost its compare {attempts} times")]
    Contended { event_id: String, attempts: u32 },
    #[error(transparent)]
    Overflow(#[from] CounterOverflow),
    /// The learner's step is not written yet.
    #[error("the `{step}` step is not written yet: {hint}")]
    NotWritten {
        step: &'static str,
        hint: &'static str,
    },
}
