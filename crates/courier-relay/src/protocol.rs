//! The two steps a protocol writes: `create` (task + idempotency record +
//! outbox entry) and `complete` (dedup + result + task + counter), and the
//! choice of protocol.
//!
//! The relay's and the worker's transport (reading the outbox, publishing,
//! pulling, acknowledging) is shared by every protocol (`relay`, `worker`);
//! a protocol differs only in these two steps and in the order of the
//! transport's two steps ([`Protocol::relay_order`], [`Protocol::worker_order`]).

use crate::limits::RelayLimits;
use crate::model::{CounterOverflow, CreateRequest, Event, Protocol};
use crate::store::{Store, StoreError};
use crate::{broken, reference, starter};
use rand::Rng;

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

/// Runs the protocol's create step.
pub async fn create(
    protocol: Protocol,
    store: &Store,
    req: &CreateRequest,
    task_id: &str,
    limits: &RelayLimits,
) -> Result<Created, CreateError> {
    match protocol {
        Protocol::Starter => starter::create(store, req, task_id, limits).await,
        _ => reference::create(store, req, task_id, limits).await,
    }
}

/// Runs the protocol's complete step for one delivered event.
pub async fn complete(
    protocol: Protocol,
    store: &Store,
    event: &Event,
    worker: &str,
    limits: &RelayLimits,
    rng: &mut (impl Rng + Send),
) -> Result<Applied, ApplyError> {
    match protocol {
        Protocol::Starter => starter::complete(store, event, worker, limits).await,
        Protocol::NoDedup => broken::complete_without_dedup(store, event, limits, rng).await,
        _ => reference::complete(store, event, worker, limits, rng).await,
    }
}
