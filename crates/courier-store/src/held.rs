//! Actions held `unknown` (migration 25, `courier_core::tier`): the hold a
//! worker writes when its provider's tier gives no way to learn whether an
//! earlier attempt went out, the operators' list of them, and an
//! operator's resolution.
//!
//! # Invariants
//! - A hold is fenced like a settle, and writes its `events` row in the
//!   same statement: every action held `unknown` is on the list.
//! - A hold never leaves `unknown` an action whose outbox row already has
//!   a status from a webhook (evidence of a send).
//! - Only an `unknown` action can be resolved; "not sent" ends it `failed`
//!   with `resolved_as = 'not_sent'`, which `courier.redrive` admits.

use crate::decode::{parse_state, status_col};
use crate::error::StoreError;
use crate::lease::{Fenced, Lease};
use crate::pool::PgStore;
use courier_core::{ActionState, Status};
use std::fmt;
use std::str::FromStr;

/// An operator's answer about an action held `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// The provider has the message: the action ends `done`.
    Sent,
    /// Nothing went out: the action ends `failed`, and may be re-driven.
    NotSent,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Sent => "sent",
            Resolution::NotSent => "not_sent",
        }
    }
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Resolution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sent" => Ok(Resolution::Sent),
            "not_sent" | "not-sent" => Ok(Resolution::NotSent),
            _ => Err(format!("resolution {s:?}: one of sent, not_sent")),
        }
    }
}

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Held `unknown`, listed for an operator.
    Unknown,
    /// A webhook had already reported this status for the action's key:
    /// it ended `dispatched` (or `done` on a final status) instead.
    Evidenced(Status),
}

/// What a resolution did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveOutcome {
    /// The action is now in this state (`done` or `failed`).
    Resolved(ActionState),
    /// No such action, or one of a store the caller may not see.
    NotFound,
    /// Nothing changed: the action is not `unknown` but in this state.
    Refused(ActionState),
}

/// One action on the operators' list of held actions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeldUnknown {
    pub id: i64,
    pub store: String,
    pub to: String,
    /// When the worker held it (RFC 3339, UTC, milliseconds).
    pub held_at: String,
    /// Why (`courier_core::step::HoldReason::as_str`).
    pub reason: String,
    /// Attempts counted for its key.
    pub attempts: i32,
    pub idempotency_key: Option<String>,
}

impl PgStore {
    /// Ends a claimed action `unknown`, fenced on its lease, with its
    /// store's slot released and an `events` row (`held_unknown`) written
    /// in the same statement; or, when a webhook has already merged a
    /// status for its key, `dispatched` (`done` on a final status), as a
    /// settle would. Answers how it ended.
    pub async fn action_hold(
        &self,
        lease: &Lease,
        reason: &str,
    ) -> Result<Result<Held, Fenced>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                sql!("settle/hold"),
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &reason,
                    &self.clock.now(),
                ],
            )
            .await?;
        if row.get::<_, i64>("changed") == 0 {
            return Ok(Err(self.fenced_now(lease).await?));
        }
        let state = parse_state(row.get("state"))?;
        Ok(Ok(match state {
            ActionState::Unknown => Held::Unknown,
            _ => Held::Evidenced(status_col(&row, "status")?),
        }))
    }

    /// Resolves action `id`, held `unknown` (`courier.resolve`); `stores`
    /// and `by` as for [`PgStore::action_cancel`].
    pub async fn action_resolve(
        &self,
        id: i64,
        resolution: Resolution,
        by: &str,
        stores: Option<&[String]>,
    ) -> Result<ResolveOutcome, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                "SELECT outcome, state FROM courier.resolve($1, $2, $3, $4)",
                &[&id, &resolution.as_str(), &by, &stores],
            )
            .await?;
        let outcome: &str = row.get(0);
        Ok(match outcome {
            "resolved" => ResolveOutcome::Resolved(parse_state(row.get(1))?),
            "not_found" => ResolveOutcome::NotFound,
            "refused" => ResolveOutcome::Refused(parse_state(row.get(1))?),
            other => {
                return Err(StoreError::Query(format!(
                    "courier.resolve answered {other:?} to {resolution}"
                )))
            }
        })
    }

    /// The actions held `unknown`, newest hold first, at most `limit`;
    /// only `stores`' when given.
    pub async fn actions_unknown(
        &self,
        limit: i64,
        stores: Option<&[String]>,
    ) -> Result<Vec<HeldUnknown>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(sql!("report/unknown"), &[&limit, &stores])
            .await?;
        Ok(rows
            .iter()
            .map(|r| HeldUnknown {
                id: r.get(0),
                store: r.get(1),
                to: r.get(2),
                held_at: r.get(3),
                reason: r.get(4),
                attempts: r.get(5),
                idempotency_key: r.get(6),
            })
            .collect())
    }
}
