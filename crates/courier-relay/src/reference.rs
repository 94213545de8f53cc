//! The reference protocol's two steps.
//!
//! # Invariants
//! - `create` writes the task, its idempotency record and its outbox entry in
//!   one transaction, only if the idempotency key (and the task id) are new; a
//!   repeat reads the first answer back and writes nothing.
//! - `complete` writes the dedup record, the result, the completed task and the
//!   counter in one transaction, only if the dedup key is absent and the
//!   counter's mod revision is the one the new value was computed from. A lost
//!   compare is read back on the else branch: a dedup record there means the
//!   effect is already committed (by another worker, or by this worker's own
//!   attempt whose answer was lost), so the event is suppressed.
//! - Retries after an unknown outcome resend the same guarded transaction, so
//!   a retry never applies an effect twice.

use crate::limits::RelayLimits;
use crate::model::{
    event_id_for, plan_apply, validate_task_id, ApplyPlan, CreateRequest, DedupRecord, Event,
    IdemRecord, ResultRecord, TaskRecord, TaskState,
};
use crate::outcome::{Applied, ApplyError, CreateError, Created};
use crate::store::{counter_from, decode, encode, get_answer, Store, StoreError};
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use rand::Rng;
use std::time::Duration;

/// Attempts of one create after unknown outcomes.
pub const CREATE_ATTEMPTS_MAX: u32 = 5;

/// Checks a create request before anything is written.
pub fn validate_request(
    req: &CreateRequest,
    task_id: &str,
    limits: &RelayLimits,
) -> Result<(), CreateError> {
    courier_core::validate_key(&req.idempotency_key)
        .map_err(|e| CreateError::BadRequest(e.to_string()))?;
    validate_task_id(task_id).map_err(|e| CreateError::BadRequest(e.to_string()))?;
    if req.amount == 0 || req.amount > limits.amount_max {
        return Err(CreateError::BadRequest(format!(
            "amount {} is outside 1..={}",
            req.amount, limits.amount_max
        )));
    }
    Ok(())
}

/// Step 1: task + idempotency record + outbox entry, atomically, once per key.
pub async fn create(
    store: &Store,
    req: &CreateRequest,
    task_id: &str,
    limits: &RelayLimits,
) -> Result<Created, CreateError> {
    validate_request(req, task_id, limits)?;
    let keys = store.keys();
    let event_id = event_id_for(task_id);
    let idem_key = keys.idem(&req.idempotency_key);
    let task = TaskRecord {
        task_id: task_id.to_string(),
        event_id: event_id.clone(),
        amount: req.amount,
        state: TaskState::Pending,
    };
    let idem = IdemRecord {
        task_id: task_id.to_string(),
        amount: req.amount,
    };
    let event = Event {
        event_id: event_id.clone(),
        task_id: task_id.to_string(),
        amount: req.amount,
    };
    let txn = Txn::new()
        .when(vec![
            Compare::create_revision(idem_key.clone(), CompareOp::Equal, 0),
            Compare::create_revision(keys.task(task_id), CompareOp::Equal, 0),
        ])
        .and_then(vec![
            TxnOp::put(idem_key.clone(), encode(&idem), None),
            TxnOp::put(keys.task(task_id), encode(&task), None),
            TxnOp::put(keys.outbox(task_id), encode(&event), None),
        ])
        .or_else(vec![TxnOp::get(idem_key, None)]);

    let mut attempt = 0;
    let resp = loop {
        attempt += 1;
        match store.txn(txn.clone()).await {
            Ok(resp) => break resp,
            // The compares make resending harmless: if the first attempt
            // committed, this one takes the else branch and reads it back.
            Err(e) if e.is_unknown() && attempt < CREATE_ATTEMPTS_MAX => {
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    if resp.succeeded() {
        return Ok(Created {
            task_id: task_id.to_string(),
            event_id,
            created: true,
        });
    }
    let Some(kv) = get_answer(&resp, 0).into_iter().next() else {
        // The key is new, so the task id compare failed.
        return Err(CreateError::TaskIdTaken(task_id.to_string()));
    };
    let first: IdemRecord = decode(&kv)?;
    if first.amount != req.amount {
        return Err(CreateError::KeyReused {
            key: req.idempotency_key.clone(),
            first_task_id: first.task_id,
            first_amount: first.amount,
            amount: req.amount,
        });
    }
    Ok(Created {
        event_id: event_id_for(&first.task_id),
        task_id: first.task_id,
        created: false,
    })
}

/// Step 3: dedup + result + completed task + counter, atomically, once per event.
pub async fn complete(
    store: &Store,
    event: &Event,
    worker: &str,
    limits: &RelayLimits,
    rng: &mut (impl Rng + Send),
) -> Result<Applied, ApplyError> {
    let keys = store.keys();
    let mut conflicts = 0u32;
    let mut last_error: Option<StoreError> = None;
    // What the last else branch showed, so a lost compare costs no extra read.
    let mut known = None;
    for attempt in 0..limits.apply_attempts_max {
        let (dedup_present, counter) = match known.take() {
            Some(k) => k,
            None => match store.apply_read(&event.event_id).await {
                Ok((dedup, counter)) => (dedup.is_some(), counter),
                Err(e) if e.is_unknown() => {
                    last_error = Some(e);
                    pause(attempt, limits, rng).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            },
        };
        let (expect_mod_revision, counter_after) =
            match plan_apply(dedup_present, counter, event.amount)? {
                ApplyPlan::Suppress => return Ok(Applied::Suppressed { conflicts }),
                ApplyPlan::Commit {
                    expect_mod_revision,
                    counter_after,
                } => (expect_mod_revision, counter_after),
            };
        let dedup = DedupRecord {
            task_id: event.task_id.clone(),
            worker: worker.to_string(),
        };
        // The record expires with its lease, after the retention window.
        let lease = match store.dedup_lease().await {
            Ok(id) => id,
            Err(e) if e.is_unknown() => {
                last_error = Some(e);
                pause(attempt, limits, rng).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
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
            .when(vec![
                Compare::create_revision(keys.dedup(&event.event_id), CompareOp::Equal, 0),
                Compare::mod_revision(keys.counter(), CompareOp::Equal, expect_mod_revision),
            ])
            .and_then(vec![
                TxnOp::put(
                    keys.dedup(&event.event_id),
                    encode(&dedup),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(keys.result(&event.task_id), encode(&result), None),
                TxnOp::put(keys.task(&event.task_id), encode(&task), None),
                TxnOp::put(keys.counter(), counter_after.to_string(), None),
            ])
            .or_else(vec![
                TxnOp::get(keys.dedup(&event.event_id), None),
                TxnOp::get(keys.counter(), None),
            ]);
        match store.txn(txn).await {
            Ok(resp) if resp.succeeded() => {
                return Ok(Applied::Committed {
                    counter_after,
                    conflicts,
                });
            }
            Ok(resp) => {
                conflicts += 1;
                let dedup_present = !get_answer(&resp, 0).is_empty();
                let counter = counter_from(get_answer(&resp, 1).first())?;
                known = Some((dedup_present, counter));
                if !dedup_present && conflicts > 1 {
                    pause(attempt, limits, rng).await;
                }
            }
            // Unknown: the transaction may have committed. Read again; the
            // dedup record tells.
            Err(e) if e.is_unknown() => {
                last_error = Some(e);
                pause(attempt, limits, rng).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    match last_error {
        Some(e) if conflicts == 0 => Err(e.into()),
        _ => Err(ApplyError::Contended {
            event_id: event.event_id.clone(),
            attempts: limits.apply_attempts_max,
        }),
    }
}

/// A jittered pause between attempts, so competing workers spread out.
pub(crate) async fn pause(attempt: u32, limits: &RelayLimits, rng: &mut (impl Rng + Send)) {
    let ms = courier_core::backoff::delay_ms(
        attempt.min(16),
        limits.apply_backoff_base_ms,
        limits.apply_backoff_cap_ms,
        rng,
    );
    tokio::time::sleep(Duration::from_millis(ms)).await;
}
