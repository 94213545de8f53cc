//! Time and intent (migration 23): promoting due scheduled actions,
//! expiring unclaimed ones past their deadline, cancelling, re-driving.
//!
//! Each is one call of a SQL function of schema `courier`, so that an
//! application in any language can make the same calls (`SELECT * FROM
//! courier.cancel(42, 'ops')`) with the same rules.
//!
//! # Invariants
//! - A cancel is a compare-and-set in the database under the action row's
//!   lock, like a claim: one of the two wins, and a worker never needs to
//!   hear of it.
//! - A re-drive is refused unless the recorded refusal was a 400 (which,
//!   under the provider contract, created nothing).

use crate::decode::parse_state;
use crate::error::StoreError;
use crate::pool::PgStore;
use courier_core::ActionState;

/// What a cancel did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was scheduled or pending; it is now `cancelled`, and no worker
    /// can claim it.
    Cancelled,
    /// No such action, or one of a store the caller may not touch.
    NotFound,
    /// Nothing changed: the action is in this state (claimed or dispatched:
    /// a request may be on the wire; or already final).
    Refused(ActionState),
}

/// What a re-drive did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveOutcome {
    /// A new action (this id) with a new key, linked both ways.
    Redriven(i64),
    /// Re-driven before, as this action.
    Already(i64),
    NotFound,
    /// Nothing changed, for this reason.
    Refused {
        state: ActionState,
        reason: String,
    },
}

/// Scheduled actions due soon ([`PgStore::scheduled_due`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScheduledDue {
    pub within_minute: i64,
    pub within_hour: i64,
}

/// What one tick of the schedule did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleTick {
    /// Scheduled actions now pending.
    pub promoted: u32,
    /// Unclaimed actions now expired.
    pub expired: u32,
}

impl PgStore {
    /// Cancels action `id` if no worker holds it (`courier.cancel`).
    /// `stores`: the stores the caller may touch (`None`: any, an admin);
    /// `by`: who asked (a token's name), recorded in the `events` row.
    pub async fn action_cancel(
        &self,
        id: i64,
        by: &str,
        stores: Option<&[String]>,
    ) -> Result<CancelOutcome, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                "SELECT outcome, state FROM courier.cancel($1, $2, $3)",
                &[&id, &by, &stores],
            )
            .await?;
        let outcome: &str = row.get(0);
        Ok(match outcome {
            "cancelled" => CancelOutcome::Cancelled,
            "not_found" => CancelOutcome::NotFound,
            _ => CancelOutcome::Refused(parse_state(row.get(1))?),
        })
    }

    /// Re-drives action `id` as a new action (`courier.redrive`); the same
    /// `stores` and `by` as [`PgStore::action_cancel`].
    pub async fn action_redrive(
        &self,
        id: i64,
        by: &str,
        stores: Option<&[String]>,
    ) -> Result<RedriveOutcome, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                "SELECT outcome, new_id, state, reason FROM courier.redrive($1, $2, $3)",
                &[&id, &by, &stores],
            )
            .await?;
        let outcome: &str = row.get(0);
        Ok(match outcome {
            "redriven" => RedriveOutcome::Redriven(row.get(1)),
            "already" => RedriveOutcome::Already(row.get(1)),
            "not_found" => RedriveOutcome::NotFound,
            _ => RedriveOutcome::Refused {
                state: parse_state(row.get(2))?,
                reason: row.get(3),
            },
        })
    }

    /// Scheduled actions due within a minute and within an hour, each
    /// counted up to `cap`: a walk of `actions_scheduled`'s time index from
    /// its start that stops at the hour or the cap, whatever the number of
    /// actions scheduled for later.
    pub async fn scheduled_due(&self, cap: i64) -> Result<ScheduledDue, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE s.not_before <= t.at + interval '1 minute'),
                        count(*)
                 FROM (SELECT coalesce($1::timestamptz, now()) AS at) t
                 CROSS JOIN LATERAL (
                     SELECT not_before FROM actions_scheduled
                     WHERE not_before <= t.at + interval '1 hour'
                     ORDER BY not_before LIMIT $2) s",
                &[&self.clock.now(), &cap],
            )
            .await?;
        Ok(ScheduledDue {
            within_minute: row.get(0),
            within_hour: row.get(1),
        })
    }

    /// One tick of the schedule: at most `promote_max` due scheduled
    /// actions become pending (`courier.promote_due`), then at most
    /// `expire_max` unclaimed actions past their deadline end `expired`
    /// (`courier.expire_due`), each in its own transaction. Safe to run from
    /// every worker at once.
    pub async fn schedule_tick(
        &self,
        promote_max: i32,
        expire_max: i32,
    ) -> Result<ScheduleTick, StoreError> {
        let client = self.pool.get().await?;
        let at = self.clock.now();
        let promoted: i32 = client
            .query_one(
                "SELECT courier.promote_due($1, $2::timestamptz)",
                &[&promote_max, &at],
            )
            .await?
            .get(0);
        let expired: i32 = if expire_max > 0 {
            client
                .query_one(
                    "SELECT courier.expire_due($1, $2::timestamptz)",
                    &[&expire_max, &at],
                )
                .await?
                .get(0)
        } else {
            0
        };
        Ok(ScheduleTick {
            promoted: promoted.max(0) as u32,
            expired: expired.max(0) as u32,
        })
    }
}
