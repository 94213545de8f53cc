//! Capped, jittered exponential backoff.

use rand::Rng;

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
}
