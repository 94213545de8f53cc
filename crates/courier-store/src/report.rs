//! Counts for `courier status`, the demo and the chaos report, and what the
//! verifier needs to know of each action.

use crate::counts::counts_read;
use crate::decode::{opt_status_col, state_col, state_count};
use crate::error::StoreError;
use crate::pool::PgStore;
use courier_core::{ActionState, Status};
use serde::Serialize;
use tokio_postgres::Row;

/// What the verifier needs to know of each action.
#[derive(Debug, Clone, Serialize)]
pub struct ActionOutcome {
    pub action_id: i64,
    /// The action's uid, from which its idempotency key derives.
    pub uid: String,
    pub state: ActionState,
    pub final_status: Option<Status>,
    pub not_before: Option<chrono::DateTime<chrono::Utc>>,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Stores a summary lists (the busiest first; only stores with work).
pub const SUMMARY_STORES_MAX: i64 = 100;

/// Counts for `courier status`, the demo and the chaos report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Actions by state: only the states some action is in, by name.
    pub by_state: Vec<(ActionState, i64)>,
    pub by_status: Vec<(String, i64)>,
    pub events: Vec<(String, i64)>,
    /// The busiest stores with work, at most [`SUMMARY_STORES_MAX`].
    pub stores: Vec<StoreBacklog>,
    pub oldest_open_intent_s: Option<f64>,
    /// Counted up to [`crate::INTENTS_PAST_ALERT_COUNTED_MAX`].
    pub intents_older_than_alert: i64,
    pub attempts_total: i64,
    pub lookups_total: i64,
}

impl Summary {
    /// Actions in a state: an [`ActionState`], or its name (`"done"`).
    pub fn state(&self, s: impl AsRef<str>) -> i64 {
        state_count(&self.by_state, s.as_ref())
    }
    pub fn event(&self, s: &str) -> i64 {
        self.events
            .iter()
            .find(|(k, _)| k == s)
            .map_or(0, |(_, v)| *v)
    }
    pub fn total(&self) -> i64 {
        self.by_state.iter().map(|(_, v)| v).sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreBacklog {
    pub store: String,
    pub pending: i64,
    pub in_flight: i32,
}

fn pairs(rows: &[Row]) -> Vec<(String, i64)> {
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

impl PgStore {
    /// Owners holding claimed actions, most first.
    pub async fn owners_holding(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(sql!("report/owners_holding"), &[&self.clock.now()])
            .await?;
        Ok(pairs(&rows))
    }

    /// Every action with its key and final status, for the verifier.
    pub async fn action_outcomes(&self) -> Result<Vec<ActionOutcome>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql!("report/outcomes"), &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(ActionOutcome {
                    action_id: r.get("id"),
                    uid: r.get::<_, uuid::Uuid>("uid").simple().to_string(),
                    state: state_col(r, "state")?,
                    final_status: opt_status_col(r, "final_status")?,
                    not_before: r.get("not_before"),
                    expires_at: r.get("expires_at"),
                })
            })
            .collect()
    }

    /// Counts by state and status, events by kind (the maintained counts:
    /// no scan of the history), per-store backlog and the oldest open intent.
    pub async fn summary(&self, intent_alert_s: u64) -> Result<Summary, StoreError> {
        let client = self.pool.get().await?;
        let counts = counts_read(&**client).await?;
        let by_state = counts.by_state()?;
        let by_status = counts
            .under("outbox.")
            .into_iter()
            .filter(|(k, _)| k != "attempts" && k != "lookups")
            .collect();
        let events = counts.under("events.");
        let stores = client
            .query(
                sql!("report/store_backlog"),
                &[&SUMMARY_STORES_MAX, &self.clock.now()],
            )
            .await?
            .iter()
            .map(|r| StoreBacklog {
                store: r.get(0),
                in_flight: r.get(1),
                pending: r.get(2),
            })
            .collect();
        let alert = intent_alert_s as f64;
        let open = client
            .query_one(
                sql!("report/open_intents"),
                &[
                    &alert,
                    &crate::INTENTS_PAST_ALERT_COUNTED_MAX,
                    &self.clock.now(),
                ],
            )
            .await?;
        Ok(Summary {
            by_state,
            by_status,
            events,
            stores,
            oldest_open_intent_s: open.get(0),
            intents_older_than_alert: open.get(1),
            attempts_total: counts.get("outbox.attempts"),
            lookups_total: counts.get("outbox.lookups"),
        })
    }
}
