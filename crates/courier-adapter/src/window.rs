//! The claim latencies of the last `window_s` seconds, in bounded memory:
//! one HdrHistogram (3 significant figures) per second of the window,
//! merged when a sample is taken.
//!
//! # Invariants
//! - Memory is bounded by the window, not by the number of jobs: at most
//!   `window_s + 1` histograms are held, each of a fixed size.
//! - A sample at second `s` counts exactly the values recorded in seconds
//!   `s - window_s + 1 ..= s`.

use hdrhistogram::Histogram;
use std::collections::VecDeque;

/// The largest latency recorded as itself, in microseconds (one hour);
/// larger values are recorded as this.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;

#[derive(Debug)]
pub struct Window {
    window_s: u64,
    /// (second, histogram of the values recorded in it), oldest first.
    slots: VecDeque<(u64, Histogram<u32>)>,
    /// Spare histograms, reused so that steady state allocates nothing.
    spare: Vec<Histogram<u32>>,
    merged: Histogram<u32>,
}

/// p50, p95 and p99 in milliseconds, and how many values they summarise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub count: u64,
}

fn histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("fixed, valid bounds")
}

impl Window {
    pub fn new(window_s: u64) -> Self {
        Window {
            window_s: window_s.max(1),
            slots: VecDeque::new(),
            spare: Vec::new(),
            merged: histogram(),
        }
    }

    /// Records one latency, in microseconds, at wall-clock second `second`.
    pub fn record(&mut self, second: u64, latency_us: u64) {
        self.expire(second);
        if self.slots.back().is_none_or(|(s, _)| *s < second) {
            let h = self.spare.pop().unwrap_or_else(histogram);
            self.slots.push_back((second, h));
        }
        // A value from a second already passed (a clock step back) joins the newest slot.
        if let Some((_, h)) = self.slots.back_mut() {
            h.saturating_record(latency_us.clamp(1, LATENCY_US_MAX));
        }
    }

    /// The percentiles of the window that ends with second `second`, or
    /// None when it holds no value.
    pub fn percentiles(&mut self, second: u64) -> Option<Percentiles> {
        self.expire(second);
        self.merged.reset();
        for (_, h) in &self.slots {
            // Same bounds, so the merge cannot fail.
            let _ = self.merged.add(h);
        }
        let count = self.merged.len();
        (count > 0).then(|| Percentiles {
            p50_ms: self.merged.value_at_quantile(0.50) as f64 / 1_000.0,
            p95_ms: self.merged.value_at_quantile(0.95) as f64 / 1_000.0,
            p99_ms: self.merged.value_at_quantile(0.99) as f64 / 1_000.0,
            count,
        })
    }

    fn expire(&mut self, second: u64) {
        let first_kept = second.saturating_sub(self.window_s - 1);
        while self.slots.front().is_some_and(|(s, _)| *s < first_kept) {
            if let Some((_, mut h)) = self.slots.pop_front() {
                h.reset();
                self.spare.push(h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_cover_exactly_the_window() {
        let mut w = Window::new(30);
        for i in 1..=100u64 {
            w.record(1_000, i * 1_000); // 1..100 ms, at second 1000
        }
        w.record(1_001, 5_000_000); // one slow job a second later
        let p = w.percentiles(1_029).unwrap();
        assert_eq!(p.count, 101);
        assert!((p.p50_ms - 51.0).abs() <= 0.1, "{p:?}");
        assert!((p.p99_ms - 100.0).abs() <= 0.1, "{p:?}");
        // Second 1000 has left the window; only the slow job remains.
        let p = w.percentiles(1_030).unwrap();
        assert_eq!(p.count, 1);
        assert!((p.p50_ms - 5_000.0).abs() <= 5.0, "{p:?}");
        assert_eq!(w.percentiles(1_031), None);
    }

    #[test]
    fn memory_is_bounded_by_the_window() {
        let mut w = Window::new(30);
        for s in 0..1_000u64 {
            w.record(s, 1_000);
        }
        assert_eq!(w.slots.len(), 30);
        assert!(w.spare.len() <= 1);
    }

    #[test]
    fn three_significant_figures() {
        let mut w = Window::new(30);
        w.record(1, 123_456); // 123.456 ms
        let p = w.percentiles(1).unwrap();
        assert!((p.p50_ms - 123.456).abs() / 123.456 < 0.001, "{p:?}");
    }
}
