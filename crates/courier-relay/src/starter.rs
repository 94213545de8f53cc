//! The learner's skeleton (`courier relay lab --protocol starter`).
//!
//! The relay and the worker around these two functions are written and
//! shared with the reference (read `relay.rs` and `worker.rs` for their
//! order and their fault hooks). Two steps are left to write; until they are,
//! the lab stops at the first one it needs and names it.
//!
//! Compare with `--protocol reference` (`reference.rs`): the assertions are
//! the same for every protocol.
//!
//! Tools at hand: `store.keys()` names every key (`task`, `idem`, `outbox`,
//! `dedup`, `result`, `counter`); `store.txn(Txn)` runs one etcd transaction
//! (`etcd_client::{Txn, TxnOp, Compare, CompareOp}`); `store::encode`,
//! `store::decode`, `store::get_answer` and `store::counter_from` read and
//! write the records of `model.rs`; `model::plan_apply` is the decision.

use crate::limits::RelayLimits;
use crate::model::{CreateRequest, Event};
use crate::outcome::{Applied, ApplyError, CreateError, Created};
use crate::store::Store;

/// Step 1, create. TODO(learner): in ONE transaction, and only if
/// `idem/<key>` does not exist (compare its create revision with 0), put the
/// `TaskRecord` (pending), the `IdemRecord` and the outbox `Event`
/// (`event_id = model::event_id_for(task_id)`). On the else branch get
/// `idem/<key>` and return the first task with `created: false`; refuse a
/// repeat whose amount differs (`CreateError::KeyReused`). An unknown
/// outcome (`StoreError::Unknown`) may be retried as is: the compare makes it safe.
pub async fn create(
    _store: &Store,
    _req: &CreateRequest,
    _task_id: &str,
    _limits: &RelayLimits,
) -> Result<Created, CreateError> {
    Err(CreateError::NotWritten {
        step: "create",
        hint: "write starter::create in crates/courier-relay/src/starter.rs (task + idempotency record + outbox entry in one etcd transaction)",
    })
}

/// Step 3, complete. TODO(learner): read `dedup/<event_id>` and the counter
/// (`store.apply_read`). If the dedup record exists, return
/// `Applied::Suppressed`. Otherwise, in ONE transaction guarded by
/// "dedup key absent" and "counter mod revision unchanged", put the
/// `DedupRecord`, the `ResultRecord`, the completed `TaskRecord` and the
/// counter plus the amount; on a lost compare read the else branch back and
/// try again (a dedup record there means suppress). Do not ACK here: the
/// worker ACKs after this returns.
pub async fn complete(
    _store: &Store,
    _event: &Event,
    _worker: &str,
    _limits: &RelayLimits,
) -> Result<Applied, ApplyError> {
    Err(ApplyError::NotWritten {
        step: "complete",
        hint: "write starter::complete in crates/courier-relay/src/starter.rs (dedup + result + task + counter in one guarded etcd transaction)",
    })
}
