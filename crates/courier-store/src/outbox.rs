//! The outbox: the send intent (written once per action, ever), attempts
//! counted before each request leaves, and the reconciler's checks.

use crate::decode::status_col;
use crate::error::StoreError;
use crate::lease::{Fenced, Lease};
use crate::pool::PgStore;
use courier_core::Status;

/// Open intents past the age alert are counted up to this many (a count
/// that reaches it reads "at least"): the count walks the oldest open intents
/// and stops there, so its cost does not follow a backlog of open intents.
pub const INTENTS_PAST_ALERT_COUNTED_MAX: i64 = 10_000;

/// The outbox row as the owner sees it after writing (or finding) the intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub key: String,
    pub attempts: u32,
    pub status: Status,
    /// True when this call wrote the intent; false when it already existed.
    pub written_now: bool,
    /// How long ago the intent was written (when the key's first attempt
    /// was counted), in milliseconds by the store's clock; 0 when written now.
    pub age_ms: u64,
}

/// The answer to counting an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Counted: the action's attempts so far, this one included.
    Counted(u32),
    /// Not counted: our lease ends within the margin; extend it first.
    LeaseShort,
    /// Not counted: the action is no longer ours.
    Fenced(Fenced),
}

/// An action whose final status is overdue (or in conflict): look it up.
#[derive(Debug, Clone)]
pub struct DueCheck {
    pub action_id: i64,
    pub key: String,
}

impl PgStore {
    /// Writes the send intent: in one statement (so one transaction), the
    /// compare-and-set on `(owner, epoch)` and the insert of the outbox row
    /// with the action's stable key. If the intent exists (a reclaim), it is
    /// returned as it is now: this read happens after the claim committed, so
    /// it sees every attempt the previous owner counted.
    pub async fn outbox_intent(
        &self,
        lease: &Lease,
        key: &str,
    ) -> Result<Result<Intent, Fenced>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                &client.prepare_cached(sql!("outbox/intent")).await?,
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &key,
                    &self.clock.now(),
                ],
            )
            .await?;
        let held: bool = row.get("held");
        if !held {
            return Ok(Err(Fenced {
                current_epoch: row.get("current_epoch"),
            }));
        }
        let written: i64 = row.get("written");
        let stored_key: String = row.get("idem_key");
        if stored_key != key {
            return Err(StoreError::Query(format!(
                "intent of action {} has key {stored_key}, expected {key}",
                lease.action_id
            )));
        }
        Ok(Ok(Intent {
            key: stored_key,
            attempts: u32::try_from(row.get::<_, i32>("attempts")).unwrap_or(0),
            status: status_col(&row, "status")?,
            written_now: written == 1,
            age_ms: u64::try_from(row.get::<_, i64>("age_ms")).unwrap_or(0),
        }))
    }

    /// Counts an attempt before the request leaves: fenced on `(owner, epoch)`
    /// and refused when the lease ends within `margin_ms` (by the store's
    /// clock). The action row is locked first, so a reclaim cannot slip in
    /// between the check and the increment.
    pub async fn outbox_count_attempt(
        &self,
        lease: &Lease,
        margin_ms: u64,
    ) -> Result<AttemptOutcome, StoreError> {
        let client = self.pool.get().await?;
        let margin = margin_ms as f64;
        let now = self.clock.now();
        let row = client
            .query_one(
                &client.prepare_cached(sql!("outbox/count_attempt")).await?,
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &margin,
                    &now,
                ],
            )
            .await?;
        let attempts: Option<i32> = row.get("attempts");
        let held: bool = row.get("held");
        Ok(match (attempts, held) {
            (Some(a), _) => AttemptOutcome::Counted(u32::try_from(a).unwrap_or(0)),
            (None, true) => AttemptOutcome::LeaseShort,
            (None, false) => AttemptOutcome::Fenced(Fenced {
                current_epoch: row.get("current_epoch"),
            }),
        })
    }

    /// Intents whose `intents_watched` row disagrees with them: always none
    /// (migration 15). A checker for `tests/intents_watched.rs`; it reads
    /// every intent.
    pub async fn intents_watched_mismatch(&self) -> Result<Vec<i64>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql!("outbox/watched_mismatch"), &[]).await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Picks actions due for a reconciling lookup (final status overdue, or a
    /// conflict) and pushes their next check out, so concurrent reconcilers
    /// take different ones.
    pub async fn outbox_due_checks(
        &self,
        n: u32,
        recheck_ms: u64,
    ) -> Result<Vec<DueCheck>, StoreError> {
        let client = self.pool.get().await?;
        let recheck = recheck_ms as f64;
        let rows = client
            .query(
                sql!("outbox/due_checks"),
                &[&i64::from(n), &recheck, &self.clock.now()],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| DueCheck {
                action_id: r.get(0),
                key: r.get(1),
            })
            .collect())
    }

    /// Open intents older than `age_s`, counted up to
    /// [`INTENTS_PAST_ALERT_COUNTED_MAX`]: past the provider's key retention
    /// a resend could be a second message, so these are reported.
    pub async fn intents_older_than(&self, age_s: u64) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        let age = age_s as f64;
        let row = client
            .query_one(
                sql!("outbox/open_older_than"),
                &[&age, &INTENTS_PAST_ALERT_COUNTED_MAX, &self.clock.now()],
            )
            .await?;
        Ok(row.get(0))
    }
}
