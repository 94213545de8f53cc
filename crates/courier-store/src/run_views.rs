//! The views of a run's actions and the bulk fills that set one up, for
//! the benchmarks (`courier-bench`), the public queue benchmark's adapter
//! (`courier-adapter`) and tests: how far the actions got (progress, the
//! pending count, each action's outcome), and actions or idle stores
//! written in bulk.
//!
//! Nothing here is used by the courier at run time. The benchmarks' own
//! SQL (latencies, server counters, statement statistics, the pgbench
//! table, seeded history) lives in `courier-bench`.
//!
//! # Invariants
//! - Read views only read: they never change an action, an outbox row or a store.
//! - Bulk enqueue writes exactly what [`crate::action_enqueue`] writes for an
//!   action without a client key (a store row if missing, one pending action
//!   with a fresh uid), so the worker cannot tell the two apart.

use crate::error::StoreError;
use crate::pool::PgStore;
use serde::Serialize;

/// Counts of actions by whether a worker still has something to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ActionProgress {
    pub total: i64,
    /// Pending or claimed.
    pub open: i64,
    /// Settled: dispatched, done or failed.
    pub settled: i64,
    pub done: i64,
}

/// One action as the queue benchmark's adapter is judged on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionOutcome {
    pub id: i64,
    pub state: String,
    /// The intent's idempotency key; None before the first claim.
    pub key: Option<String>,
    pub attempts: i32,
}

/// The largest bulk enqueue in one statement.
pub const BULK_ENQUEUE_MAX: u32 = 1_000_000;

impl PgStore {
    /// How many actions there are, how many are still open, settled and done.
    pub async fn actions_progress(&self) -> Result<ActionProgress, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*),
                        count(*) FILTER (WHERE state IN ('scheduled', 'pending', 'claimed')),
                        count(*) FILTER (WHERE state IN ('dispatched', 'done', 'failed')),
                        count(*) FILTER (WHERE state = 'done')
                 FROM actions",
                &[],
            )
            .await?;
        Ok(ActionProgress {
            total: row.get(0),
            open: row.get(1),
            settled: row.get(2),
            done: row.get(3),
        })
    }

    /// Actions waiting for a claim now (the queue benchmark's depth). One
    /// count of `actions_ready` (migration 12), so its cost follows the
    /// backlog, not the history.
    pub async fn actions_pending_count(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) FROM actions_ready", &[])
            .await?;
        Ok(row.get(0))
    }

    /// Every action's state and idempotency key (none before its first
    /// claim), by id: what the queue benchmark's adapter is judged on.
    pub async fn actions_outcomes(&self) -> Result<Vec<ActionOutcome>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT a.id, a.state, o.idem_key, coalesce(o.attempts, 0)
                 FROM actions a LEFT JOIN outbox o ON o.action_id = a.id
                 ORDER BY a.id",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| ActionOutcome {
                id: r.get(0),
                state: r.get(1),
                key: r.get(2),
                attempts: r.get(3),
            })
            .collect())
    }

    /// Enqueues `n` actions in one transaction through the set form
    /// (`courier.enqueue_many`, in calls of at most
    /// [`courier_core::ENQUEUE_MANY_MAX`]), spread round-robin over
    /// `stores`, each with no client key, a valid phone number and a short
    /// body. Returns how many it enqueued.
    pub async fn actions_enqueue_bulk(&self, stores: &[String], n: u32) -> Result<u64, StoreError> {
        if stores.is_empty() || n == 0 {
            return Ok(0);
        }
        if n > BULK_ENQUEUE_MAX {
            return Err(StoreError::Query(format!(
                "bulk enqueue of {n} actions is above {BULK_ENQUEUE_MAX}"
            )));
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let mut count = 0u64;
        let chunk = courier_core::ENQUEUE_MANY_MAX;
        for first in (0..n).step_by(chunk as usize) {
            let news: Vec<crate::NewAction> = (first..n.min(first + chunk))
                .map(|g| crate::NewAction {
                    store: stores[g as usize % stores.len()].clone(),
                    to: format!("+1555{:07}", g % 10_000_000),
                    body: format!("bench message {g}"),
                    key: None,
                    ..Default::default()
                })
                .collect();
            let made = crate::actions_enqueue_many(&*tx, &news)
                .await
                .map_err(|e| match e {
                    crate::EnqueueError::Store(e) => e,
                    other => StoreError::Query(format!("bulk enqueue: {other}")),
                })?;
            count += made.len() as u64;
        }
        tx.commit().await?;
        Ok(count)
    }

    /// Registers `n` stores named `{prefix}-NNNNNNN`, served a day ago and
    /// with no work: the idle tenants of `courier bench scale`, written in
    /// one statement of SQL rather than through the enqueue API (a million
    /// enqueues would measure the enqueue). Returns how many it added.
    pub async fn stores_seed_idle(&self, prefix: &str, n: u32) -> Result<u64, StoreError> {
        if n > BULK_ENQUEUE_MAX {
            return Err(StoreError::Query(format!(
                "{n} idle stores is above {BULK_ENQUEUE_MAX}"
            )));
        }
        let client = self.client().await?;
        Ok(client
            .execute(
                "INSERT INTO stores (store, last_served_at, created_at)
                 SELECT $1::text || '-' || lpad(g::text, 7, '0'),
                        now() - interval '1 day', now() - interval '30 days'
                 FROM generate_series(1, $2::bigint) AS g
                 ON CONFLICT (store) DO NOTHING",
                &[&prefix, &i64::from(n)],
            )
            .await?)
    }
}
