//! Capped, jittered exponential backoff, and the jittered waits of the
//! worker's loops.

use rand::Rng;

/// The backoff of a store call that failed (the database is away or
/// restarting): the first retry waits about 100 ms, later ones up to 2 s.
pub const STORE_RETRY_BASE_MS: u64 = 100;
pub const STORE_RETRY_CAP_MS: u64 = 2_000;

/// The delay before retry number `retry` (0 for the first retry): the
/// exponential step `base_ms * 2^retry`, capped at `cap_ms`, then drawn
/// uniformly from its upper half, so concurrent retries spread out but none
/// comes back at once.
pub fn delay_ms(retry: u32, base_ms: u64, cap_ms: u64, rng: &mut impl Rng) -> u64 {
    let step = base_ms
        .saturating_mul(1u64 << retry.min(32))
        .min(cap_ms)
        .max(1);
    rng.random_range(step / 2..=step)
}

/// The delay before retry number `retry` of a failed store call.
pub fn store_retry_delay_ms(retry: u32, rng: &mut impl Rng) -> u64 {
    delay_ms(retry, STORE_RETRY_BASE_MS, STORE_RETRY_CAP_MS, rng)
}

/// How long an idle claimer waits before asking again: uniform in
/// `[poll_ms / 2, poll_ms * 3 / 2]`, so idle workers do not ask in step.
pub fn idle_wait_ms(poll_ms: u64, rng: &mut impl Rng) -> u64 {
    poll_ms / 2 + rng.random_range(0..=poll_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn delays_grow_and_stay_under_the_cap() {
        let mut rng = StdRng::seed_from_u64(7);
        for retry in 0..40 {
            let d = delay_ms(retry, 10, 2_000, &mut rng);
            let step = (10u64 << retry.min(32)).min(2_000);
            assert!(d >= step / 2 && d <= step, "retry {retry}: {d}");
        }
        assert!(delay_ms(0, 0, 0, &mut rng) <= 1);
    }

    #[test]
    fn store_retries_start_near_100_ms_and_stop_at_2_s() {
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..100 {
            assert!((50..=100).contains(&store_retry_delay_ms(0, &mut rng)));
            assert!((1_000..=2_000).contains(&store_retry_delay_ms(30, &mut rng)));
        }
    }

    #[test]
    fn idle_waits_spread_around_the_poll_interval() {
        let mut rng = StdRng::seed_from_u64(5);
        let waits: Vec<u64> = (0..1_000).map(|_| idle_wait_ms(20, &mut rng)).collect();
        assert!(waits.iter().all(|w| (10..=30).contains(w)));
        // Both ends are reached: the jitter really spreads the waits.
        assert!(waits.contains(&10) && waits.contains(&30));
        assert_eq!(idle_wait_ms(0, &mut rng), 0);
    }
}
