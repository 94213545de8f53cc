//! Every limit of the courier in one place, checked once in [`Limits::validate`].
//! Units are the last part of each name.

use serde::{Deserialize, Serialize};

/// The longest message body, in characters: the provider contract's limit,
/// checked for every caller by the SQL enqueue (`courier.enqueue_problem`,
/// migration 21) and the schema's CHECK; `courier-store`'s tests keep the
/// three equal.
pub const BODY_CHARS_MAX: u32 = 1_600;

/// The most actions one call of the SQL set form (`courier.enqueue_many`)
/// takes; more are refused with SQLSTATE 54000.
pub const ENQUEUE_MANY_MAX: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// How long a claim (or a heartbeat) keeps an action for its owner.
    pub lease_ttl_ms: u64,
    /// How often a worker extends the leases it holds.
    pub heartbeat_interval_ms: u64,
    /// The local safety margin: no request leaves when the lease, as this
    /// process measured it, ends within this margin.
    pub send_margin_ms: u64,
    /// Client time-out of one send or lookup.
    pub request_timeout_ms: u64,
    /// Actions of one store held by workers at once.
    pub store_in_flight_max: u32,
    /// Actions claimed in one round trip.
    pub claim_batch_max: u32,
    /// Actions one worker process works on at once.
    pub worker_concurrency_max: u32,
    /// Largest HTTP request body the server reads (one action).
    pub payload_bytes_max: u32,
    /// Most actions in one `POST /v1/actions:batch` (at most
    /// [`ENQUEUE_MANY_MAX`], the set form's own ceiling).
    pub enqueue_batch_max: u32,
    /// Largest HTTP request body of a batch.
    pub batch_payload_bytes_max: u32,
    /// Backoff of lookups after unknown outcomes.
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    /// A dispatched action with no final status after this long gets a lookup.
    pub final_overdue_ms: u64,
    /// How long the provider remembers a key (the guarantee's horizon).
    pub key_retention_s: u64,
    /// Open intents older than this share of the key retention are reported.
    pub intent_age_alert_percent: u32,
    /// How long after a request lands the provider's lookup may still
    /// answer "not found" (the contract allows a lag): at least the
    /// provider's. Past an action's `expires_at`, a "not found" ends it
    /// `expired` only once this long has passed since the deadline, by
    /// which time every request (each left before the deadline, with the
    /// send margin to land) is visible.
    pub lookup_lag_ms: u64,
    /// How often each worker moves due scheduled actions to pending and
    /// ends unclaimed actions past their `expires_at`.
    pub schedule_tick_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lease_ttl_ms: 5_000,
            heartbeat_interval_ms: 1_000,
            send_margin_ms: 500,
            request_timeout_ms: 2_000,
            store_in_flight_max: 4,
            claim_batch_max: 16,
            worker_concurrency_max: 32,
            payload_bytes_max: 64 * 1024,
            enqueue_batch_max: 1_000,
            batch_payload_bytes_max: 8 * 1024 * 1024,
            backoff_base_ms: 50,
            backoff_cap_ms: 2_000,
            final_overdue_ms: 10_000,
            key_retention_s: 3_600,
            intent_age_alert_percent: 50,
            lookup_lag_ms: 2_000,
            schedule_tick_ms: 250,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid limits: {0}")]
pub struct LimitsError(pub String);

impl Limits {
    pub fn validate(&self) -> Result<(), LimitsError> {
        let fail = |m: &str| Err(LimitsError(m.to_string()));
        if self.lease_ttl_ms == 0 || self.heartbeat_interval_ms == 0 {
            return fail("lease_ttl_ms and heartbeat_interval_ms must be positive");
        }
        if self.heartbeat_interval_ms * 2 > self.lease_ttl_ms {
            return fail("heartbeat_interval_ms must be at most half of lease_ttl_ms");
        }
        if self.request_timeout_ms + self.send_margin_ms >= self.lease_ttl_ms {
            return fail("request_timeout_ms + send_margin_ms must be below lease_ttl_ms");
        }
        if self.store_in_flight_max == 0 || self.claim_batch_max == 0 {
            return fail("store_in_flight_max and claim_batch_max must be positive");
        }
        if self.worker_concurrency_max == 0 {
            return fail("worker_concurrency_max must be positive");
        }
        if self.enqueue_batch_max == 0 || self.enqueue_batch_max > ENQUEUE_MANY_MAX {
            return fail("enqueue_batch_max must be within 1..=10000 (the set form's ceiling)");
        }
        if self.batch_payload_bytes_max < self.payload_bytes_max {
            return fail("batch_payload_bytes_max must be at least payload_bytes_max");
        }
        if self.backoff_base_ms == 0 || self.backoff_cap_ms < self.backoff_base_ms {
            return fail("backoff_base_ms must be positive and at most backoff_cap_ms");
        }
        if self.schedule_tick_ms == 0 || self.schedule_tick_ms > 1_000 {
            return fail("schedule_tick_ms must be within 1..=1000 (a due action is claimable within a second)");
        }
        if self.intent_age_alert_percent == 0 || self.intent_age_alert_percent >= 100 {
            return fail("intent_age_alert_percent must be within 1..=99");
        }
        Ok(())
    }

    /// Age in seconds past which an open intent is reported.
    pub fn intent_age_alert_s(&self) -> u64 {
        self.key_retention_s * u64::from(self.intent_age_alert_percent) / 100
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Limits::default().validate(), Ok(()));
        assert_eq!(Limits::default().intent_age_alert_s(), 1_800);
    }

    #[test]
    fn inconsistent_limits_are_refused() {
        let l = Limits {
            heartbeat_interval_ms: 3_000,
            ..Limits::default()
        };
        assert!(l.validate().is_err());
        let l = Limits {
            request_timeout_ms: 5_000,
            ..Limits::default()
        };
        assert!(l.validate().is_err());
        let l = Limits {
            enqueue_batch_max: ENQUEUE_MANY_MAX + 1,
            ..Limits::default()
        };
        assert!(l.validate().is_err());
        let l = Limits {
            enqueue_batch_max: 0,
            ..Limits::default()
        };
        assert!(l.validate().is_err());
        let l = Limits {
            store_in_flight_max: 0,
            ..Limits::default()
        };
        assert!(l.validate().is_err());
    }
}
