//! Flow control's pure parts: a store's settings (its rate, its burst, its
//! in-flight cap) and a provider's ceiling, their validation, and the token
//! bucket both are metered by.
//!
//! The buckets themselves live in PostgreSQL (the claim debits them, see
//! courier-store's `sql/lease/claim_fair.sql`), so every worker process
//! shares one budget; [`tokens_now`] is the same arithmetic, for tests and
//! for reports.
//!
//! # Invariants
//! - A bucket never holds more than its burst, and never lends: over any
//!   span `t`, at most `burst + rate * t` sends are granted.
//! - Every limit has a bound ([`RATE_PER_S_MAX`], [`BURST_MAX`],
//!   [`IN_FLIGHT_MAX`]); a value outside it is refused, never clamped.

use serde::{Deserialize, Serialize};

/// The highest rate a store or a provider may be given, sends a second.
pub const RATE_PER_S_MAX: f64 = 100_000.0;
/// The lowest: one send in a little under 17 minutes.
pub const RATE_PER_S_MIN: f64 = 0.001;
/// The largest bucket.
pub const BURST_MAX: u32 = 100_000;
/// The highest per-store in-flight cap.
pub const IN_FLIGHT_MAX: u32 = 10_000;
/// The longest a provider's `Retry-After` is honoured; a longer one is
/// taken as this (a misconfigured provider cannot stop courier for a day
/// without an operator seeing it in `/metrics`).
pub const PAUSE_MS_MAX: u64 = 300_000;

/// A store's flow-control settings, as an operator sets them
/// (`PUT /v1/stores/{store}`, `courier store set`). Every field may be
/// left out: a store never configured, or configured with nothing, has no
/// rate and the worker's in-flight cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSettings {
    /// Sends a second, at most, shared by every worker; absent: no rate.
    #[serde(default)]
    pub rate_per_s: Option<f64>,
    /// How many sends may leave at once after a quiet spell (the bucket's
    /// size). Only with a rate; absent: one second's worth, rounded up.
    #[serde(default)]
    pub burst: Option<u32>,
    /// At most this many of the store's actions in flight at once;
    /// absent: the worker's `--store-in-flight-max`.
    #[serde(default)]
    pub in_flight_max: Option<u32>,
}

/// A provider's ceiling (`PUT /v1/providers/{name}`, `courier provider
/// set`): sends a second to it from all workers together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    /// Sends a second, at most; absent: no ceiling.
    #[serde(default)]
    pub rate_per_s: Option<f64>,
    /// As a store's burst.
    #[serde(default)]
    pub burst: Option<u32>,
}

/// A rate and its bucket, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_s: f64,
    pub burst: u32,
}

/// Settings refused, with the field that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SettingsError {
    pub field: &'static str,
    pub reason: String,
}

fn refuse(field: &'static str, reason: impl Into<String>) -> SettingsError {
    SettingsError {
        field,
        reason: reason.into(),
    }
}

/// Validates a rate and its burst (both absent: no rate).
pub fn validate_rate(
    per_s: Option<f64>,
    burst: Option<u32>,
) -> Result<Option<Rate>, SettingsError> {
    let Some(per_s) = per_s else {
        return match burst {
            None => Ok(None),
            Some(_) => Err(refuse("burst", "a burst needs a rate_per_s")),
        };
    };
    if !per_s.is_finite() || !(RATE_PER_S_MIN..=RATE_PER_S_MAX).contains(&per_s) {
        return Err(refuse(
            "rate_per_s",
            format!("{per_s} is outside {RATE_PER_S_MIN}..={RATE_PER_S_MAX} sends a second"),
        ));
    }
    let burst = match burst {
        Some(b) if b == 0 || b > BURST_MAX => {
            return Err(refuse("burst", format!("{b} is outside 1..={BURST_MAX}")))
        }
        Some(b) => b,
        // One second's worth, at least one send.
        None => (per_s.ceil() as u32).clamp(1, BURST_MAX),
    };
    Ok(Some(Rate { per_s, burst }))
}

/// Checks a store's or a provider's name: 1 to 64 of `A-Z a-z 0-9 - _ .`,
/// as an enqueue checks a store's.
pub fn validate_name(field: &'static str, name: &str) -> Result<(), SettingsError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(refuse(field, "1 to 64 characters of A-Z a-z 0-9 - _ ."))
    }
}

impl StoreSettings {
    /// The rate these settings give, and the in-flight cap, checked.
    pub fn validate(&self) -> Result<(Option<Rate>, Option<u32>), SettingsError> {
        let rate = validate_rate(self.rate_per_s, self.burst)?;
        match self.in_flight_max {
            Some(n) if n == 0 || n > IN_FLIGHT_MAX => Err(refuse(
                "in_flight_max",
                format!("{n} is outside 1..={IN_FLIGHT_MAX}"),
            )),
            cap => Ok((rate, cap)),
        }
    }
}

impl ProviderSettings {
    pub fn validate(&self) -> Result<Option<Rate>, SettingsError> {
        validate_rate(self.rate_per_s, self.burst)
    }
}

/// The tokens a bucket holds `elapsed_ms` after it held `tokens`: refilled
/// at the rate, never past the burst (what the claim computes in SQL).
pub fn tokens_now(rate: Rate, tokens: f64, elapsed_ms: u64) -> f64 {
    (tokens + rate.per_s * elapsed_ms as f64 / 1_000.0).min(f64::from(rate.burst))
}

/// How long to pause a provider after it answered "too many requests":
/// its `Retry-After` when it gave one (at most [`PAUSE_MS_MAX`]), else a
/// backoff doubling from 1 s with each such answer in a row (`streak`,
/// from 1), to 30 s.
pub fn pause_ms(retry_after_ms: Option<u64>, streak: u32) -> u64 {
    match retry_after_ms {
        Some(ms) => ms.clamp(1, PAUSE_MS_MAX),
        None => 1_000u64
            .saturating_mul(1 << streak.saturating_sub(1).min(5))
            .min(30_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_alone_gets_one_seconds_worth_of_burst() {
        let r = validate_rate(Some(5.0), None).unwrap().unwrap();
        assert_eq!(
            r,
            Rate {
                per_s: 5.0,
                burst: 5
            }
        );
        let slow = validate_rate(Some(0.1), None).unwrap().unwrap();
        assert_eq!(slow.burst, 1);
        assert_eq!(validate_rate(None, None), Ok(None));
    }

    #[test]
    fn out_of_range_settings_are_refused_with_their_field() {
        for (rate, burst, field) in [
            (Some(-1.0), None, "rate_per_s"),
            (Some(0.0), None, "rate_per_s"),
            (Some(f64::NAN), None, "rate_per_s"),
            (Some(f64::INFINITY), None, "rate_per_s"),
            (Some(RATE_PER_S_MAX * 2.0), None, "rate_per_s"),
            (Some(5.0), Some(0), "burst"),
            (Some(5.0), Some(BURST_MAX + 1), "burst"),
            (None, Some(3), "burst"),
        ] {
            assert_eq!(validate_rate(rate, burst).unwrap_err().field, field);
        }
        let cap = StoreSettings {
            in_flight_max: Some(0),
            ..Default::default()
        };
        assert_eq!(cap.validate().unwrap_err().field, "in_flight_max");
    }

    #[test]
    fn names_follow_the_enqueues_rule() {
        assert!(validate_name("store", "shop-1.eu_x").is_ok());
        for bad in ["", "a b", "x/y", &"s".repeat(65)] {
            assert_eq!(validate_name("store", bad).unwrap_err().field, "store");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = serde_json::from_str::<StoreSettings>(r#"{"rate":5}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let ok: StoreSettings = serde_json::from_str(r#"{"rate_per_s":5,"burst":10}"#).unwrap();
        assert_eq!(ok.burst, Some(10));
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let r = Rate {
            per_s: 5.0,
            burst: 10,
        };
        assert_eq!(tokens_now(r, 0.0, 200), 1.0);
        assert_eq!(tokens_now(r, 0.5, 1_000), 5.5);
        assert_eq!(tokens_now(r, 9.0, 60_000), 10.0);
    }

    #[test]
    fn a_pause_honours_retry_after_within_its_bound_else_backs_off() {
        assert_eq!(pause_ms(Some(2_000), 1), 2_000);
        assert_eq!(pause_ms(Some(86_400_000), 1), PAUSE_MS_MAX);
        assert_eq!(pause_ms(None, 1), 1_000);
        assert_eq!(pause_ms(None, 2), 2_000);
        assert_eq!(pause_ms(None, 3), 4_000);
        assert_eq!(pause_ms(None, 40), 30_000);
    }
}
