//! How long courier keeps what it has finished with, every window stated,
//! checked once in [`Retention::validate`] against the [`Limits`] it must
//! outlast. Units are the last part of each name.
//!
//! | what | removed after | it must outlast |
//! |---|---|---|
//! | a finished action (`done`, `failed`) and its outbox row | `action_retention_s` after it finished | the provider's key retention (`Limits::key_retention_s`), the webhook retry horizon, and it *is* the enqueue-repeat window |
//! | a webhook event id | `webhook_event_retention_s` after it was received | the webhook retry horizon |
//! | an `events` row | `event_retention_s` after it was recorded (a `held_unknown` row: not while its action is still held) | nothing (operators' history; the held actions' list) |
//!
//! The enqueue-repeat window: an enqueue with a `(store, key)` seen before is
//! the same action for as long as that action exists, which is while it is
//! unfinished and `action_retention_s` after it finished; after that the same
//! `(store, key)` is a new action (as Stripe's keys last 24 hours).
//!
//! # Invariants
//! - `action_retention_s > key_retention_s`: a finished action's key is
//!   forgotten by the provider before its outbox row is removed (the key's
//!   first use precedes the finish). The prune statement checks the key
//!   retention again itself (`sql/prune/actions.sql`), and
//!   `crates/courier-store/tests/prune.rs` shows each refusal.
//! - `action_retention_s > webhook_retry_horizon_s`: a late webhook finds its
//!   intent instead of a 404.
//! - `webhook_event_retention_s > webhook_retry_horizon_s`: a retried event id
//!   is still recognised as a duplicate.

use crate::Limits;
use serde::{Deserialize, Serialize};

/// The retention windows and the pruner's bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Finished actions (and their outbox rows) are removed this long after
    /// they finished; also the enqueue-repeat window.
    pub action_retention_s: u64,
    /// How long after an event's first POST a provider may still retry it.
    /// The contract does not fix it: the fake retries at most 8 times with
    /// a 2 s time-out and at most 2 s between attempts (under 35 s).
    pub webhook_retry_horizon_s: u64,
    /// Webhook event ids are removed this long after they were received.
    pub webhook_event_retention_s: u64,
    /// `events` rows are removed this long after they were recorded.
    pub event_retention_s: u64,
    /// Rows one prune statement removes at most (one short transaction).
    pub prune_batch_rows_max: u32,
    /// How often the pruner looks for work when the last round found little.
    pub prune_interval_ms: u64,
}

/// The longest window accepted (ten years): guards against unit mistakes.
pub const RETENTION_S_MAX: u64 = 10 * 365 * 24 * 3600;

impl Default for Retention {
    /// Why these: 24 h for actions is Stripe's idempotency-key window and 24
    /// times the provider's default key retention (1 h); 6 h of webhook
    /// retries is 600 times the fake's schedule and covers a provider that
    /// resumes its queue after an outage of hours; event ids are kept twice
    /// the horizon; a week of events covers a weekend's investigation.
    fn default() -> Self {
        Retention {
            action_retention_s: 24 * 3600,
            webhook_retry_horizon_s: 6 * 3600,
            webhook_event_retention_s: 12 * 3600,
            event_retention_s: 7 * 24 * 3600,
            prune_batch_rows_max: 1_000,
            prune_interval_ms: 5_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid retention: {0}")]
pub struct RetentionError(pub String);

impl Retention {
    /// Checks the windows against each other and against `limits`' key
    /// retention; the message names the setting to change.
    pub fn validate(&self, limits: &Limits) -> Result<(), RetentionError> {
        let fail = |m: String| Err(RetentionError(m));
        for (name, v) in [
            ("action_retention_s", self.action_retention_s),
            ("webhook_retry_horizon_s", self.webhook_retry_horizon_s),
            ("webhook_event_retention_s", self.webhook_event_retention_s),
            ("event_retention_s", self.event_retention_s),
        ] {
            if v == 0 || v > RETENTION_S_MAX {
                return fail(format!("{name} must be within 1..={RETENTION_S_MAX}"));
            }
        }
        if self.action_retention_s <= limits.key_retention_s {
            return fail(format!(
                "action_retention_s ({}) must be above the provider's key retention ({} s): a removed intent's key could still be replayed",
                self.action_retention_s, limits.key_retention_s
            ));
        }
        if self.action_retention_s <= self.webhook_retry_horizon_s {
            return fail(format!(
                "action_retention_s ({}) must be above webhook_retry_horizon_s ({}): a late webhook would find no intent",
                self.action_retention_s, self.webhook_retry_horizon_s
            ));
        }
        if self.webhook_event_retention_s <= self.webhook_retry_horizon_s {
            return fail(format!(
                "webhook_event_retention_s ({}) must be above webhook_retry_horizon_s ({}): a retried event would not be known as a duplicate",
                self.webhook_event_retention_s, self.webhook_retry_horizon_s
            ));
        }
        if !(1..=100_000).contains(&self.prune_batch_rows_max) {
            return fail("prune_batch_rows_max must be within 1..=100000".into());
        }
        if !(10..=3_600_000).contains(&self.prune_interval_ms) {
            return fail("prune_interval_ms must be within 10..=3600000".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_against_default_limits() {
        assert_eq!(Retention::default().validate(&Limits::default()), Ok(()));
    }

    #[test]
    fn a_retention_that_does_not_outlast_its_windows_is_refused() {
        let limits = Limits::default();
        let r = Retention {
            action_retention_s: limits.key_retention_s,
            ..Retention::default()
        };
        assert!(r.validate(&limits).unwrap_err().0.contains("key retention"));
        let r = Retention {
            webhook_retry_horizon_s: Retention::default().action_retention_s,
            webhook_event_retention_s: RETENTION_S_MAX,
            ..Retention::default()
        };
        assert!(r.validate(&limits).unwrap_err().0.contains("late webhook"));
        let r = Retention {
            webhook_event_retention_s: Retention::default().webhook_retry_horizon_s,
            ..Retention::default()
        };
        assert!(r.validate(&limits).unwrap_err().0.contains("duplicate"));
        let r = Retention {
            event_retention_s: 0,
            ..Retention::default()
        };
        assert!(r.validate(&limits).is_err());
    }
}
