//! The owner's last writes: settles (the provider's answer recorded, the
//! lease released) and fails (the provider refused the action). Both are
//! fenced on `(owner, epoch)` and release the store's slot by appending to
//! `store_releases`. A settle has one form, the batch ([`PgStore::actions_settle`]);
//! a single settle is a batch of one. The runtime batches them
//! (courier-dispatch's group commit).

use crate::decode::{opt_status_col, state_col, status_col};
use crate::error::StoreError;
use crate::lease::{Fenced, Lease};
use crate::pool::PgStore;
use courier_core::status::{fold_report, merge_event_kind, Merge};
use courier_core::{ActionState, Status};
use deadpool_postgres::Transaction;
use std::collections::HashMap;

/// One settle: what the provider said of a claimed action (from a send or a
/// lookup by its owner).
#[derive(Debug, Clone)]
pub struct SettleReq {
    pub lease: Lease,
    pub report: Status,
    pub message_id: Option<String>,
    pub from_lookup: bool,
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    pub status: Status,
    pub merge: Merge,
}

/// The answer to one settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Settled now, or earlier by this very lease (a retry after a commit
    /// whose answer was lost: then the merge is [`Merge::Same`]).
    Settled(Settled),
    /// The action is no longer ours: nothing written.
    Fenced(Fenced),
}

/// What the fence found of one held action: its store and outbox row.
struct HeldRow {
    store: String,
    status: Status,
    conflict: bool,
}

/// The columns of a batch's write (`sql/settle/write.sql`).
#[derive(Default)]
struct SettleWrite<'a> {
    ids: Vec<i64>,
    statuses: Vec<&'static str>,
    message_ids: Vec<Option<&'a str>>,
    conflicts: Vec<bool>,
    done: Vec<bool>,
    stores: Vec<String>,
    event_kinds: Vec<&'static str>,
    event_ids: Vec<i64>,
    event_details: Vec<&'static str>,
}

impl PgStore {
    /// Settles claimed actions in one transaction. Per action: fenced on
    /// owner and epoch, the report folded forward-only into the outbox row,
    /// the action dispatched (or done, on a final status without conflict),
    /// the lease released, the store's slot released, backward and
    /// conflicting reports recorded. An action no longer held is answered
    /// with its own earlier settle (a retry) or [`SettleOutcome::Fenced`]. If
    /// the batch fails for a reason other than the database being away, each
    /// settle is written as a batch of its own, so one bad request cannot
    /// hold back the others: hence an answer per request, in order.
    pub async fn actions_settle(
        &self,
        reqs: &[SettleReq],
        final_overdue_ms: u64,
    ) -> Result<Vec<Result<SettleOutcome, StoreError>>, StoreError> {
        match self.settle_together(reqs, final_overdue_ms).await {
            Ok(v) => Ok(v.into_iter().map(Ok).collect()),
            Err(StoreError::Query(e)) if reqs.len() > 1 => {
                tracing::warn!(error = %e, n = reqs.len(), "settle batch failed; settling one by one");
                let mut out = Vec::with_capacity(reqs.len());
                for r in reqs {
                    let one = self.settle_together(std::slice::from_ref(r), final_overdue_ms);
                    out.push(one.await.map(|mut v| v.remove(0)));
                }
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    async fn settle_together(
        &self,
        reqs: &[SettleReq],
        final_overdue_ms: u64,
    ) -> Result<Vec<SettleOutcome>, StoreError> {
        if reqs.is_empty() {
            return Ok(Vec::new());
        }
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        // Plans made for this batch's arrays and the tables as they are now.
        // A prepared statement's generic plan, made once while the tables
        // were young, joined the batch to `actions` by a sequential scan and
        // kept doing so while the table grew, until the next analyse
        // (docs/benchmarks.md). Only these two statements pay for planning:
        // forcing custom plans on every statement cost the claim 3.5x.
        tx.batch_execute(sql!("settle/custom_plans")).await?;
        let held = settles_lock(&tx, reqs).await?;
        let (write, answers) = settles_fold(reqs, held);
        if !write.ids.is_empty() {
            settles_write(&tx, &write, final_overdue_ms).await?;
        }
        tx.commit().await?;
        drop(client);

        // Those not held: a retry after a lost commit answer, or fenced.
        let mut out = Vec::with_capacity(reqs.len());
        for (r, a) in reqs.iter().zip(answers) {
            out.push(match a {
                Some(s) => SettleOutcome::Settled(s),
                None => self.settle_refused(&r.lease).await?,
            });
        }
        Ok(out)
    }

    /// After a refused settle: was it ours already (a retry after a commit
    /// whose answer was lost) or is it fenced?
    async fn settle_refused(&self, lease: &Lease) -> Result<SettleOutcome, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(sql!("settle/held_before"), &[&lease.action_id])
            .await?;
        let Some(row) = row else {
            return Ok(SettleOutcome::Fenced(Fenced {
                current_epoch: None,
            }));
        };
        let owner: Option<String> = row.get("owner");
        let epoch: i64 = row.get("epoch");
        let state = state_col(&row, "state")?;
        if owner.as_deref() == Some(lease.owner.as_ref())
            && epoch == lease.epoch
            && (state == ActionState::Dispatched || state == ActionState::Done)
        {
            let status = opt_status_col(&row, "status")?.unwrap_or(Status::Accepted);
            return Ok(SettleOutcome::Settled(Settled {
                status,
                merge: Merge::Same,
            }));
        }
        Ok(SettleOutcome::Fenced(Fenced {
            current_epoch: Some(epoch),
        }))
    }

    /// Marks a claimed action failed: the provider refused it (a bug or a bad
    /// action). Never followed by a resend with a new key. Fenced. Like every
    /// refused write, a fence is answered as data and recorded by the caller
    /// (the worker's `observe`), not here.
    pub async fn action_fail(
        &self,
        lease: &Lease,
        reason: &str,
    ) -> Result<Result<(), Fenced>, StoreError> {
        let client = self.pool.get().await?;
        let failed = client
            .execute(
                sql!("settle/fail"),
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &reason,
                ],
            )
            .await?;
        if failed == 0 {
            return Ok(Err(self.fenced_now(lease).await?));
        }
        Ok(Ok(()))
    }
}

/// The fence of a batch: the rows still held at each request's lease,
/// locked (action row, then its outbox row, by action id).
async fn settles_lock(
    tx: &Transaction<'_>,
    reqs: &[SettleReq],
) -> Result<HashMap<i64, HeldRow>, StoreError> {
    let ids: Vec<i64> = reqs.iter().map(|r| r.lease.action_id).collect();
    let epochs: Vec<i64> = reqs.iter().map(|r| r.lease.epoch).collect();
    let owners: Vec<&str> = reqs.iter().map(|r| r.lease.owner.as_ref()).collect();
    let rows = tx
        .query(
            &tx.prepare_cached(sql!("settle/lock")).await?,
            &[&ids, &epochs, &owners],
        )
        .await?;
    let mut held = HashMap::with_capacity(rows.len());
    for r in &rows {
        held.insert(
            r.get("id"),
            HeldRow {
                store: r.get("store"),
                status: status_col(r, "status")?,
                conflict: r.get("conflict"),
            },
        );
    }
    Ok(held)
}

/// Folds each held request's report into its row: the batch's write, and an
/// answer per request (None: not held).
fn settles_fold(
    reqs: &[SettleReq],
    mut held: HashMap<i64, HeldRow>,
) -> (SettleWrite<'_>, Vec<Option<Settled>>) {
    let mut w = SettleWrite::default();
    let mut answers = Vec::with_capacity(reqs.len());
    for r in reqs {
        let Some(row) = held.remove(&r.lease.action_id) else {
            answers.push(None);
            continue;
        };
        let (new, how) = fold_report(row.status, row.conflict, r.report, r.from_lookup);
        w.ids.push(r.lease.action_id);
        w.statuses.push(new.status.as_str());
        w.message_ids.push(r.message_id.as_deref());
        w.conflicts.push(new.conflict);
        w.done.push(new.status.is_final() && !new.conflict);
        w.stores.push(row.store);
        if let Some(kind) = merge_event_kind(how) {
            w.event_kinds.push(kind);
            w.event_ids.push(r.lease.action_id);
            w.event_details.push("settle");
        }
        answers.push(Some(Settled {
            status: new.status,
            merge: how,
        }));
    }
    (w, answers)
}

async fn settles_write(
    tx: &Transaction<'_>,
    w: &SettleWrite<'_>,
    final_overdue_ms: u64,
) -> Result<(), StoreError> {
    let overdue = final_overdue_ms as f64;
    let statement = sql!(
        "settle/write",
        "outbox/report_write.part",
        "event/record.part"
    );
    tx.execute(
        &tx.prepare_cached(statement).await?,
        &[
            &w.ids,
            &w.statuses,
            &w.message_ids,
            &w.conflicts,
            &w.done,
            &w.stores,
            &overdue,
            &w.event_kinds,
            &w.event_ids,
            &w.event_details,
        ],
    )
    .await?;
    Ok(())
}
