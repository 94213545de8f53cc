//! Retention: removing what courier has finished with, in bounded batches,
//! and folding the maintained counts (migration 6).
//!
//! Each batch is one short transaction that first takes
//! `pg_try_advisory_xact_lock(`[`PRUNE_LOCK_ID`]`)`: when another process
//! holds it (several workers, or `courier db prune` beside them), this one
//! skips the batch instead of waiting or removing the same rows.
//!
//! # Invariants
//! - Never removed (each has its test in `tests/prune.rs`): an action that is
//!   not final; a finished action, or its outbox row, whose key the provider
//!   may still replay (`key_retention_s`), even if the action retention
//!   asked for it; a webhook event id inside its window; an event inside its
//!   window. `courier_core::Retention::validate` refuses windows that do not
//!   outlast each other; the statements check their own windows again.
//! - A batch removes at most `batch_rows_max` rows of each table and waits
//!   for no row another transaction holds (SKIP LOCKED).
//! - The counts stay exact: removals count down through the same triggers as
//!   every other write, and the fold deletes exactly the deltas it adds.

use crate::error::StoreError;
use crate::pool::PgStore;
use courier_core::{Limits, Retention};
use serde::Serialize;

/// The advisory lock every pruning transaction tries first.
pub const PRUNE_LOCK_ID: i64 = 0x0063_6f75_7270_7275;

/// The windows one prune batch applies, in seconds, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneWindows {
    pub action_retention_s: u64,
    /// The provider's key retention: a finished action's row is kept at
    /// least this long after it was last heard of, whatever the above says.
    pub key_retention_s: u64,
    pub webhook_event_retention_s: u64,
    pub event_retention_s: u64,
    pub batch_rows_max: u32,
}

impl PruneWindows {
    /// The windows of a validated retention and the limits it outlasts.
    pub fn new(r: &Retention, limits: &Limits) -> PruneWindows {
        PruneWindows {
            action_retention_s: r.action_retention_s,
            key_retention_s: limits.key_retention_s,
            webhook_event_retention_s: r.webhook_event_retention_s,
            event_retention_s: r.event_retention_s,
            batch_rows_max: r.prune_batch_rows_max,
        }
    }
}

/// Rows one batch removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    pub actions: u64,
    pub outbox: u64,
    pub webhook_events: u64,
    pub events: u64,
}

impl Pruned {
    pub fn add(&mut self, o: Pruned) {
        self.actions += o.actions;
        self.outbox += o.outbox;
        self.webhook_events += o.webhook_events;
        self.events += o.events;
    }
    /// Whether some table filled its batch (more may be waiting).
    pub fn full(&self, w: &PruneWindows) -> bool {
        let max = u64::from(w.batch_rows_max);
        self.actions >= max || self.webhook_events >= max || self.events >= max
    }
}

impl PgStore {
    /// One batch of each table; `None` when another process holds the
    /// pruner's lock (nothing was removed).
    pub async fn prune_batch(&self, w: &PruneWindows) -> Result<Option<Pruned>, StoreError> {
        let now = self.clock.now();
        let rows = i64::from(w.batch_rows_max);
        let secs = |s: u64| s as f64;
        let mut out = Pruned::default();
        let Some(r) = self
            .locked(
                sql!("prune/actions"),
                &[
                    &now,
                    &rows,
                    &secs(w.action_retention_s),
                    &secs(w.key_retention_s),
                ],
            )
            .await?
        else {
            return Ok(None);
        };
        out.actions = r.0;
        out.outbox = r.1;
        let Some(r) = self
            .locked(
                sql!("prune/webhook_events"),
                &[&now, &rows, &secs(w.webhook_event_retention_s)],
            )
            .await?
        else {
            return Ok(None);
        };
        out.webhook_events = r.0;
        let Some(r) = self
            .locked(
                sql!("prune/events"),
                &[&now, &rows, &secs(w.event_retention_s)],
            )
            .await?
        else {
            return Ok(None);
        };
        out.events = r.0;
        Ok(Some(out))
    }

    /// Trims at most `rows` of the acceptances older than `keep_s` from
    /// `outbox_accepts` (the dashboard's walk keeps only the recent past;
    /// [`crate::views::ACCEPTS_KEEP_S`]); `None` when another process holds
    /// the pruner's lock. Not retention: it removes nothing but that walk's
    /// copies, and the pruner runs it even with pruning off.
    pub async fn accepts_trim(&self, rows: u32, keep_s: u64) -> Result<Option<u64>, StoreError> {
        let now = self.clock.now();
        Ok(self
            .locked(
                sql!("prune/accepts"),
                &[&now, &i64::from(rows), &(keep_s as f64)],
            )
            .await?
            .map(|r| r.0))
    }

    /// Runs `statement` (one row of one or two bigint counts) in a
    /// transaction that holds the pruner's lock; `None` if another has it.
    pub(crate) async fn locked(
        &self,
        statement: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<(u64, u64)>, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let got: bool = tx
            .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&PRUNE_LOCK_ID])
            .await?
            .get(0);
        if !got {
            return Ok(None);
        }
        let row = tx.query_one(statement, params).await?;
        let first: i64 = row.get(0);
        let second: i64 = if row.len() > 1 { row.get(1) } else { 0 };
        tx.commit().await?;
        Ok(Some((first.max(0) as u64, second.max(0) as u64)))
    }
}
