//! The fake's own rate limit (`--rate-limit`, `--rate-burst`): a token
//! bucket that meters sends, as a provider's gateway meters requests.
//!
//! Pure: the time comes in as an argument, so a test drives it with
//! instants of its own. The HTTP layer keeps one [`SendBucket`] behind a
//! mutex and asks it about each send before the send claims its key or
//! draws its latency or fate (`crate::http::send_flow`).
//!
//! It counts in integers: a token is [`UNITS_PER_TOKEN`] units, and a rate
//! of `m` thousandths of a send a second adds exactly `m` units a
//! nanosecond, so no rounding ever admits a send the rate does not allow.
//!
//! # Invariants
//! - The bucket never holds more than `burst` tokens, and a send is
//!   admitted only by taking a whole token: over any span `t` (seconds,
//!   times given in order) at most `burst + rate * t` sends are admitted.
//! - A refused send takes nothing.
//! - A refusal's `retry_after_s` is at least 1, and after that many whole
//!   seconds, if nothing was admitted meanwhile, the bucket holds a token.
//! - A time earlier than the last one seen credits nothing.

use crate::config::SendRate;
use std::time::Instant;

/// Units in one token: a thousandth of a send a second over one
/// nanosecond is one unit.
const UNITS_PER_TOKEN: u128 = 1_000 * NANOS_PER_S;
const NANOS_PER_S: u128 = 1_000_000_000;

/// What the bucket says to one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A token was taken: the send goes on.
    Admitted,
    /// No token: answer `429` with `Retry-After: retry_after_s`.
    Limited { retry_after_s: u64 },
}

/// A token bucket over sends.
#[derive(Debug, Clone)]
pub(crate) struct SendBucket {
    /// Units added per nanosecond (the rate in thousandths a second).
    units_per_ns: u128,
    /// The most units held: `burst` tokens.
    capacity: u128,
    /// Units held at `at`.
    units: u128,
    /// The latest time seen.
    at: Instant,
}

impl SendBucket {
    /// A full bucket: `burst` sends may be admitted at once at `now`.
    pub fn new(rate: SendRate, burst: u32, now: Instant) -> SendBucket {
        debug_assert!(burst >= 1 && rate.milli_per_s() >= 1);
        let capacity = u128::from(burst) * UNITS_PER_TOKEN;
        SendBucket {
            units_per_ns: u128::from(rate.milli_per_s()),
            capacity,
            units: capacity,
            at: now,
        }
    }

    /// Admits one send at `now` by taking a token, or refuses it and says
    /// how many whole seconds until a token is back.
    pub fn admit(&mut self, now: Instant) -> Admission {
        self.refill(now);
        if self.units >= UNITS_PER_TOKEN {
            self.units -= UNITS_PER_TOKEN;
            Admission::Admitted
        } else {
            Admission::Limited {
                retry_after_s: self.retry_after_s(),
            }
        }
    }

    /// Credits the time since the latest time seen, up to the capacity.
    fn refill(&mut self, now: Instant) {
        let Some(elapsed) = now.checked_duration_since(self.at) else {
            return;
        };
        let earned = elapsed.as_nanos().saturating_mul(self.units_per_ns);
        self.units = self.units.saturating_add(earned).min(self.capacity);
        self.at = now;
    }

    /// Whole seconds, rounded up and at least 1, until the bucket holds a
    /// token again (HTTP's delta-seconds).
    fn retry_after_s(&self) -> u64 {
        let missing = UNITS_PER_TOKEN.saturating_sub(self.units);
        let ns = missing.div_ceil(self.units_per_ns);
        let s = ns.div_ceil(NANOS_PER_S).max(1);
        u64::try_from(s).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rate(text: &str) -> SendRate {
        text.parse().unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_full_bucket_admits_its_burst_then_refuses_until_a_token_is_back() {
        let t0 = Instant::now();
        let mut b = SendBucket::new(rate("2/s"), 3, t0);
        for _ in 0..3 {
            assert_eq!(b.admit(t0), Admission::Admitted);
        }
        // A token every 500 ms: none yet, one 1 s away at most.
        assert_eq!(b.admit(t0), Admission::Limited { retry_after_s: 1 });
        assert_eq!(
            b.admit(t0 + ms(499)),
            Admission::Limited { retry_after_s: 1 }
        );
        assert_eq!(b.admit(t0 + ms(500)), Admission::Admitted);
        assert_eq!(
            b.admit(t0 + ms(500)),
            Admission::Limited { retry_after_s: 1 }
        );
        assert_eq!(b.admit(t0 + ms(1_000)), Admission::Admitted);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        let t0 = Instant::now();
        // One send in 4 s: just after one was taken, a token is 4 s away.
        let mut b = SendBucket::new(rate("0.25/s"), 1, t0);
        assert_eq!(b.admit(t0), Admission::Admitted);
        assert_eq!(b.admit(t0), Admission::Limited { retry_after_s: 4 });
        assert_eq!(b.admit(t0 + ms(1)), Admission::Limited { retry_after_s: 4 });
        assert_eq!(
            b.admit(t0 + ms(1_000)),
            Admission::Limited { retry_after_s: 3 }
        );
        assert_eq!(
            b.admit(t0 + ms(3_999)),
            Admission::Limited { retry_after_s: 1 }
        );
        // Honouring it is enough: after 4 s the token is there.
        assert_eq!(b.admit(t0 + ms(4_000)), Admission::Admitted);
        // A fast rate still answers at least 1 s (delta-seconds).
        let mut fast = SendBucket::new(rate("100000/s"), 1, t0);
        assert_eq!(fast.admit(t0), Admission::Admitted);
        assert_eq!(fast.admit(t0), Admission::Limited { retry_after_s: 1 });
        // The slowest rate: 1000 s.
        let mut slow = SendBucket::new(rate("0.001/s"), 1, t0);
        assert_eq!(slow.admit(t0), Admission::Admitted);
        assert_eq!(
            slow.admit(t0),
            Admission::Limited {
                retry_after_s: 1_000
            }
        );
    }

    #[test]
    fn refused_sends_take_no_token() {
        let t0 = Instant::now();
        let mut b = SendBucket::new(rate("1/s"), 1, t0);
        assert_eq!(b.admit(t0), Admission::Admitted);
        for i in 1..100 {
            assert!(matches!(b.admit(t0 + ms(i * 9)), Admission::Limited { .. }));
        }
        // The refusals in between did not push the next token back.
        assert_eq!(b.admit(t0 + ms(1_000)), Admission::Admitted);
    }

    #[test]
    fn a_quiet_spell_fills_the_bucket_to_its_burst_and_no_further() {
        let t0 = Instant::now();
        let mut b = SendBucket::new(rate("10/s"), 4, t0);
        for _ in 0..4 {
            assert_eq!(b.admit(t0), Admission::Admitted);
        }
        let later = t0 + Duration::from_secs(3_600);
        for _ in 0..4 {
            assert_eq!(b.admit(later), Admission::Admitted);
        }
        assert!(matches!(b.admit(later), Admission::Limited { .. }));
    }

    #[test]
    fn a_time_earlier_than_the_last_credits_nothing() {
        let t0 = Instant::now();
        let mut b = SendBucket::new(rate("1/s"), 1, t0 + ms(1_000));
        assert_eq!(b.admit(t0 + ms(1_000)), Admission::Admitted);
        // Going back, then forward to where it was: no token was earned.
        assert!(matches!(b.admit(t0), Admission::Limited { .. }));
        assert!(matches!(b.admit(t0 + ms(1_000)), Admission::Limited { .. }));
        assert_eq!(b.admit(t0 + ms(2_000)), Admission::Admitted);
    }

    /// Sends at seeded, ordered times, half of them arriving together with
    /// the one before: every span between two admitted sends holds at most
    /// `burst + rate * span` of them.
    #[test]
    fn over_any_span_at_most_burst_plus_rate_times_span_are_admitted() {
        use rand::{Rng, SeedableRng};
        for (text, burst, seed) in [("3/s", 5, 1), ("0.7/s", 1, 2), ("250/s", 40, 3)] {
            let r = rate(text);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let t0 = Instant::now();
            let mut b = SendBucket::new(r, burst, t0);
            let mut now_ns: u64 = 0;
            let mut admitted_ns: Vec<u64> = Vec::new();
            let mean_gap_ns = 1_000_000_000_000 / r.milli_per_s() / 2;
            for _ in 0..2_000 {
                // Half the sends arrive together with the one before.
                if rng.random_bool(0.5) {
                    now_ns += rng.random_range(0..=2 * mean_gap_ns);
                }
                if b.admit(t0 + Duration::from_nanos(now_ns)) == Admission::Admitted {
                    admitted_ns.push(now_ns);
                }
            }
            assert!(
                admitted_ns.len() > usize::try_from(burst).unwrap(),
                "{text}"
            );
            // In units: n admissions over span d (ns) need
            // n * UNITS_PER_TOKEN <= burst * UNITS_PER_TOKEN + milli * d.
            let allowed = |n: usize, span_ns: u64| {
                (n as u128) * UNITS_PER_TOKEN
                    <= u128::from(burst) * UNITS_PER_TOKEN
                        + u128::from(r.milli_per_s()) * u128::from(span_ns)
            };
            for i in 0..admitted_ns.len() {
                for j in i..admitted_ns.len() {
                    let n = j - i + 1;
                    assert!(
                        allowed(n, admitted_ns[j] - admitted_ns[i]),
                        "{text} burst {burst}: {n} sends in {} ns",
                        admitted_ns[j] - admitted_ns[i]
                    );
                }
            }
        }
    }
}
