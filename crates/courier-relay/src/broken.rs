//! The deliberately broken step: completion without the dedup record.
//!
//! The other two mistakes are orders, not steps: `ack-before-commit` swaps the
//! worker's two steps and `mark-before-ack` swaps the relay's (see
//! [`crate::model::RelayOrder`] and [`crate::model::WorkerOrder`]). The lab
//! runs all of them under the same assertions, to show which invariant each
//! mistake breaks.

use crate::limits::RelayLimits;
use crate::model::{Event, ResultRecord, TaskRecord, TaskState};
use crate::outcome::{Applied, ApplyError};
use crate::reference::pause;
use crate::store::{counter_from, encode, Store};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use rand::Rng;

/// Commits result + completed task + counter, guarded against lost updates
/// (the counter's mod revision) but with no dedup record and no dedup check:
/// the result key is unique per task, yet a redelivered event adds its amount
/// to the counter again. A unique result does not make another effect single.
pub async fn complete_without_dedup(
    store: &Store,
    event: &Event,
    limits: &RelayLimits,
    rng: &mut (impl Rng + Send),
) -> Result<Applied, ApplyError> {
    let keys = store.keys();
    for attempt in 0..limits.apply_attempts_max {
        let counter = counter_from(store.get(&keys.counter()).await?.as_ref())?;
        let counter_after =
            counter
                .value
                .checked_add(event.amount)
                .ok_or(crate::model::CounterOverflow {
                    value: counter.value,
                    amount: event.amount,
                })?;
        let result = ResultRecord {
            event_id: event.event_id.clone(),
            amount: event.amount,
            counter_after,
        };
        let task = TaskRecord {
            task_id: event.task_id.clone(),
            event_id: event.event_id.clone(),
            amount: event.amount,
            state: TaskState::Completed,
        };
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                keys.counter(),
                CompareOp::Equal,
                counter.mod_revision,
            )])
            .and_then(vec![
                TxnOp::put(keys.result(&event.task_id), encode(&result), None),
                TxnOp::put(keys.task(&event.task_id), encode(&task), None),
                TxnOp::put(keys.counter(), counter_after.to_string(), None),
            ]);
        let resp = store.txn(txn).await?;
        if resp.succeeded() {
            // Every earlier attempt lost its compare.
            return Ok(Applied::Committed {
                counter_after,
                conflicts: attempt,
            });
        }
        pause(attempt, limits, rng).await;
    }
    Err(ApplyError::Contended {
        event_id: event.event_id.clone(),
        attempts: limits.apply_attempts_max,
    })
}
