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
use tokio_postgres::Statement;

/// The fence of a settle batch: $1 ids, $2 epochs, $3 owners.
const SETTLE_LOCK: &str = sql!("settle/lock");
/// The write of a settle batch, fenced already.
const SETTLE_WRITE: &str = sql!(
    "settle/write",
    "outbox/report_write.part",
    "event/record.part"
);

/// The settle's two statements with their parameters' types, so tests can
/// check their plans. Not an API: settle with [`PgStore::actions_settle`].
#[doc(hidden)]
pub fn settle_statements() -> [(&'static str, &'static str); 2] {
    [
        ("bigint[], bigint[], text[]", SETTLE_LOCK),
        (
            "bigint[], text[], text[], boolean[], boolean[], text[], double precision, text[], bigint[], text[], timestamptz",
            SETTLE_WRITE,
        ),
    ]
}

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
        // Prepared once per connection, before the transaction opens.
        let lock = client.prepare_cached(SETTLE_LOCK).await?;
        let write_statement = client.prepare_cached(SETTLE_WRITE).await?;
        let tx = client.transaction().await?;
        // Each statement runs its generic plan, read by key (PLAN_BY_KEY):
        // planned per call, the two statements spent 0.4 ms planning a
        // batch of one; left to the server, a generic plan made while the
        // tables were young joined the batch to `actions` by a sequential
        // scan until the next analyse (measured in an investigation that docs/benchmarks.md kept until issue 45; see its git history). The settings
        // leave with the fence, in one round trip (`biased`: sent in this
        // order).
        let (set, held) = tokio::join!(
            biased;
            tx.batch_execute(crate::PLAN_BY_KEY),
            settles_lock(&tx, &lock, reqs),
        );
        set?;
        let (write, answers) = settles_fold(reqs, held?);
        if !write.ids.is_empty() {
            let now = self.clock.now();
            settles_write(&tx, &write_statement, &write, final_overdue_ms, now).await?;
        }
        tx.commit().await?;
        drop(client);

        // Those not held: a retry after a lost commit answer, or fenced.
        debug_assert_eq!(answers.len(), reqs.len(), "an answer per request");
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
    /// `status` is the provider's HTTP status (a 400 created nothing under
    /// the contract, so only such an action may be re-driven).
    pub async fn action_fail(
        &self,
        lease: &Lease,
        status: u16,
        reason: &str,
    ) -> Result<Result<(), Fenced>, StoreError> {
        let client = self.pool.get().await?;
        let status = i16::try_from(status).unwrap_or(i16::MAX);
        let failed = client
            .execute(
                sql!("settle/fail"),
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &reason,
                    &self.clock.now(),
                    &status,
                ],
            )
            .await?;
        if failed == 0 {
            return Ok(Err(self.fenced_now(lease).await?));
        }
        Ok(Ok(()))
    }

    /// Ends a claimed action `expired`: its deadline passed and the
    /// provider has no message for its key (courier_core::step decides
    /// when that is known). Fenced, like [`PgStore::action_fail`].
    pub async fn action_expire(&self, lease: &Lease) -> Result<Result<(), Fenced>, StoreError> {
        let client = self.pool.get().await?;
        let expired = client
            .execute(
                sql!("settle/expire"),
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &self.clock.now(),
                ],
            )
            .await?;
        if expired == 0 {
            return Ok(Err(self.fenced_now(lease).await?));
        }
        Ok(Ok(()))
    }
}

/// The fence of a batch: the rows still held at each request's lease,
/// locked (action row, then its outbox row, by action id: the statement
/// locks in the order of its arrays, sorted here).
async fn settles_lock(
    tx: &Transaction<'_>,
    lock: &Statement,
    reqs: &[SettleReq],
) -> Result<HashMap<i64, HeldRow>, StoreError> {
    let mut by_id: Vec<&Lease> = reqs.iter().map(|r| &r.lease).collect();
    by_id.sort_by_key(|l| l.action_id);
    let ids: Vec<i64> = by_id.iter().map(|l| l.action_id).collect();
    let epochs: Vec<i64> = by_id.iter().map(|l| l.epoch).collect();
    let owners: Vec<&str> = by_id.iter().map(|l| l.owner.as_ref()).collect();
    let rows = tx.query(lock, &[&ids, &epochs, &owners]).await?;
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
    statement: &Statement,
    w: &SettleWrite<'_>,
    final_overdue_ms: u64,
    now: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(), StoreError> {
    let overdue = final_overdue_ms as f64;
    tx.execute(
        statement,
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
            &now,
        ],
    )
    .await?;
    Ok(())
}
