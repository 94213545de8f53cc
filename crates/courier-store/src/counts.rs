//! The maintained counts (migration 6): actions by state, intents by status,
//! the attempts and lookups of every intent, events by kind, and stores.
//! Statement-level triggers append what each write changed to
//! `count_deltas`; readers sum `counts` and the deltas (`counts_now`), so a
//! read costs the same with ten million finished actions as with none; the
//! pruner folds the deltas ([`PgStore::counts_fold`]).
//!
//! # Invariants
//! - The counts equal `count(*)` of their rows at every snapshot
//!   (`tests/prune.rs` compares them after work, prunes and folds, and shows
//!   that a write made with the triggers disabled is caught).

use crate::decode::state_count;
use crate::error::StoreError;
use crate::pool::PgStore;
use courier_core::ActionState;
use std::str::FromStr;

/// Every maintained count by name, read in one statement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts(pub Vec<(String, i64)>);

impl Counts {
    /// A count by its full name (`actions.done`, `outbox.attempts`); 0 if absent.
    pub fn get(&self, name: &str) -> i64 {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    }

    /// The non-zero counts under `prefix` (`"events."`), by the rest of
    /// their name, in name order.
    pub fn under(&self, prefix: &str) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = self
            .0
            .iter()
            .filter_map(|(k, n)| Some((k.strip_prefix(prefix)?.to_string(), *n)))
            .filter(|(_, n)| *n != 0)
            .collect();
        v.sort();
        v
    }

    /// Intents without a final status (`outbox.<status>` of every status
    /// that is not final).
    pub fn open_intents(&self) -> i64 {
        courier_core::Status::ALL
            .iter()
            .filter(|s| !s.is_final())
            .map(|s| self.get(&format!("outbox.{}", s.as_str())))
            .sum()
    }

    /// Actions by state: the states some action is in, in name order.
    pub fn by_state(&self) -> Result<Vec<(ActionState, i64)>, StoreError> {
        self.under("actions.")
            .into_iter()
            .map(|(k, n)| {
                let s = ActionState::from_str(&k).map_err(|e| StoreError::Query(e.to_string()))?;
                Ok((s, n))
            })
            .collect()
    }

    /// Actions by state, every state present (zero included), in life order.
    pub fn by_state_all(&self) -> Result<Vec<(ActionState, i64)>, StoreError> {
        let present = self.by_state()?;
        Ok(ActionState::ALL
            .iter()
            .map(|s| (*s, state_count(&present, s.as_str())))
            .collect())
    }
}

/// Reads the counts on `c` (a pooled connection or a snapshot's transaction).
pub(crate) async fn counts_read(
    c: &impl tokio_postgres::GenericClient,
) -> Result<Counts, StoreError> {
    Ok(Counts(
        c.query(sql!("counts/read"), &[])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect(),
    ))
}

impl PgStore {
    /// Every maintained count.
    pub async fn counts(&self) -> Result<Counts, StoreError> {
        let client = self.pool.get().await?;
        counts_read(&**client).await
    }

    /// Folds the count deltas into `counts`; `None` when another process
    /// holds the pruner's lock. Answers how many delta rows it folded.
    pub async fn counts_fold(&self) -> Result<Option<u64>, StoreError> {
        Ok(self.locked(sql!("counts/fold"), &[]).await?.map(|r| r.0))
    }
}
