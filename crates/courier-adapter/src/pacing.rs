//! The producer's arithmetic, pure: how many jobs a fixed rate owes after
//! some real elapsed time, and how many a depth target asks for.
//!
//! # Invariants
//! - Credit accrues on real elapsed time (`rate x (now - last)`), never per
//!   loop iteration: a late iteration owes more, so a slow insert or a
//!   stalled scheduler does not lower the offered rate (the harness's
//!   guide names per-iteration crediting as the mistake that under-metered
//!   another adapter by 18-22%).
//! - The owed jobs of one call and the credit left always add up to the
//!   credit accrued: nothing is dropped at a batch boundary.
//! - A rate change applies from the moment it is made: the time before it
//!   is credited at the old rate.

use std::time::{Duration, Instant};

/// A fixed rate's credit, in jobs.
#[derive(Debug, Clone)]
pub struct Credit {
    rate_per_s: f64,
    credit: f64,
    last: Instant,
}

impl Credit {
    pub fn new(rate_per_s: u64, now: Instant) -> Self {
        Credit {
            rate_per_s: rate_per_s as f64,
            credit: 0.0,
            last: now,
        }
    }

    /// Whole jobs owed at `now`: the credit of the real time elapsed since
    /// the last call is added, and the whole part taken out.
    pub fn owed(&mut self, now: Instant) -> u64 {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.credit += self.rate_per_s * dt;
        let whole = self.credit.floor();
        self.credit -= whole;
        whole as u64
    }

    /// The rate credited from `now` on; the time until `now` is credited
    /// at the rate before.
    pub fn set_rate(&mut self, rate_per_s: f64, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.credit += self.rate_per_s * dt;
        self.last = now;
        self.rate_per_s = rate_per_s;
    }

    pub fn rate_per_s(&self) -> f64 {
        self.rate_per_s
    }

    /// Gives back jobs that were owed but not inserted (the insert failed),
    /// so that they are offered again.
    pub fn refund(&mut self, jobs: u64) {
        self.credit += jobs as f64;
    }
}

/// The highest rate a control file may set, in jobs/s.
pub const RATE_PER_S_MAX: f64 = 1_000_000.0;

/// A rate as the harness writes it to `PRODUCER_RATE_CONTROL_FILE`: a
/// decimal (`1200.0`, `800`), surrounding whitespace allowed. None for
/// anything else, including the empty file the harness's truncating write
/// leaves for a moment, so the caller keeps the rate it has.
pub fn parse_rate(text: &str) -> Option<f64> {
    let rate: f64 = text.trim().parse().ok()?;
    (rate.is_finite() && (0.0..=RATE_PER_S_MAX).contains(&rate)).then_some(rate)
}

/// Splits `n` jobs into insert calls of at most `batch_max` each.
pub fn batches(n: u64, batch_max: usize) -> impl Iterator<Item = usize> {
    let max = batch_max.max(1) as u64;
    let full = n / max;
    let rest = n % max;
    (0..full)
        .map(move |_| max as usize)
        .chain((rest > 0).then_some(rest as usize))
}

/// Jobs to insert now to bring an estimated depth up to the target (at most
/// one batch); zero when the queue is at or above the target.
pub fn depth_target_batch(target_depth: u64, depth_estimate: u64, batch_max: usize) -> usize {
    let missing = target_depth.saturating_sub(depth_estimate);
    missing.min(batch_max as u64) as usize
}

/// The time until the next multiple of `period` since the Unix epoch,
/// given the wall clock's `now_since_epoch`, and that boundary itself.
pub fn next_boundary(now_since_epoch: Duration, period: Duration) -> (Duration, Duration) {
    let p = period.as_nanos().max(1);
    let now = now_since_epoch.as_nanos();
    let next = (now / p + 1) * p;
    let wait = Duration::from_nanos((next - now) as u64);
    (wait, Duration::from_nanos(next as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Iterations that take 30-45 ms against a 25 ms period, for 60 s.
    fn late_iterations() -> Vec<Duration> {
        (0..1_600u64)
            .map(|i| Duration::from_millis(30 + (i * 7) % 16))
            .collect()
    }

    fn within(offered: f64, target: f64, tolerance: f64) -> bool {
        (offered - target).abs() <= target * tolerance
    }

    #[test]
    fn credit_follows_real_time_when_iterations_run_late() {
        let t0 = Instant::now();
        let mut c = Credit::new(800, t0);
        let (mut now, mut jobs) = (t0, 0u64);
        for d in late_iterations() {
            now += d;
            jobs += c.owed(now);
        }
        let offered = jobs as f64 / (now - t0).as_secs_f64();
        assert!(within(offered, 800.0, 0.001), "offered {offered}/s");
    }

    /// The negative control: crediting one nominal period per iteration,
    /// the mistake the harness's guide names, fails the 3% check this crate
    /// applies to the adapter's offered rate.
    #[test]
    fn nominal_crediting_is_caught_by_the_rate_check() {
        let (mut elapsed, mut jobs) = (Duration::ZERO, 0.0);
        for d in late_iterations() {
            elapsed += d;
            jobs += 800.0 * 0.025;
        }
        let offered = jobs / elapsed.as_secs_f64();
        assert!(!within(offered, 800.0, 0.03), "offered {offered}/s");
    }

    #[test]
    fn owed_jobs_and_the_credit_left_add_up() {
        let t0 = Instant::now();
        let mut c = Credit::new(333, t0);
        let owed =
            c.owed(t0 + Duration::from_millis(1_000)) + c.owed(t0 + Duration::from_millis(2_000));
        assert_eq!(owed, 666);
        c.refund(5);
        assert_eq!(c.owed(t0 + Duration::from_millis(2_000)), 5);
    }

    #[test]
    fn a_rate_change_credits_the_time_before_it_at_the_old_rate() {
        let t0 = Instant::now();
        let mut c = Credit::new(100, t0);
        c.set_rate(1_200.0, t0 + Duration::from_millis(500));
        // 0.5 s at 100/s, then 0.5 s at 1,200/s.
        assert_eq!(c.owed(t0 + Duration::from_millis(1_000)), 650);
        c.set_rate(0.0, t0 + Duration::from_millis(1_000));
        assert_eq!(c.owed(t0 + Duration::from_millis(5_000)), 0);
    }

    #[test]
    fn control_file_rates_are_decimals() {
        assert_eq!(parse_rate("1200.0"), Some(1_200.0));
        assert_eq!(parse_rate(" 800\n"), Some(800.0));
        assert_eq!(parse_rate("0"), Some(0.0));
        for bad in ["", "fast", "-1", "NaN", "inf", "1e9"] {
            assert_eq!(parse_rate(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn batches_cover_every_job_in_calls_of_at_most_the_max() {
        assert_eq!(batches(300, 128).collect::<Vec<_>>(), vec![128, 128, 44]);
        assert_eq!(batches(256, 128).collect::<Vec<_>>(), vec![128, 128]);
        assert_eq!(batches(0, 128).count(), 0);
    }

    #[test]
    fn depth_target_fills_up_to_the_target_one_batch_at_a_time() {
        assert_eq!(depth_target_batch(1_000, 990, 128), 10);
        assert_eq!(depth_target_batch(1_000, 0, 128), 128);
        assert_eq!(depth_target_batch(1_000, 1_200, 128), 0);
    }

    #[test]
    fn boundaries_are_multiples_of_the_period() {
        let (wait, at) = next_boundary(Duration::from_millis(12_345), Duration::from_secs(5));
        assert_eq!(
            (wait, at),
            (Duration::from_millis(2_655), Duration::from_secs(15))
        );
        let (wait, at) = next_boundary(Duration::from_secs(15), Duration::from_secs(5));
        assert_eq!(
            (wait, at),
            (Duration::from_secs(5), Duration::from_secs(20))
        );
    }
}
