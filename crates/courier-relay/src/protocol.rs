//! The two steps a protocol writes: `create` (task + idempotency record +
//! outbox entry) and `complete` (dedup + result + task + counter), and the
//! choice of protocol.
//!
//! The relay's and the worker's transport (reading the outbox, publishing,
//! pulling, acknowledging) is shared by every protocol (`relay`, `worker`);
//! a protocol differs only in these two steps and in the order of the
//! transport's two steps ([`Protocol::relay_order`], [`Protocol::worker_order`]).

use crate::limits::RelayLimits;
use crate::model::{CreateRequest, Event, Protocol};
pub use crate::outcome::{Applied, ApplyError, CreateError, Created};
use crate::store::Store;
use crate::{broken, reference, starter};
use rand::Rng;

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
