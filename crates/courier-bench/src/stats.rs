//! Percentiles, latency over time, and the calibration of worker capacity:
//! pure functions of measurements.
//!
//! # Invariants
//! - Percentiles come from one HdrHistogram (microseconds, three significant
//!   digits), so `p50 <= p95 <= p99 <= max` always holds.
//! - Utilisation is offered work over capacity: `rate * mean service time /
//!   (workers * concurrency)`; it is planned from the provider's mean latency
//!   plus a per-action database allowance and measured from claim-to-settle
//!   holds.

use courier_fake::Latency;
use hdrhistogram::Histogram;
use serde::Serialize;

/// The longest latency recorded exactly (one hour); longer ones saturate.
const LATENCY_US_MAX: u64 = 3_600_000_000;

/// Latency percentiles of a set of actions, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    /// From latencies in microseconds; None when there are none.
    pub fn from_us(values: impl IntoIterator<Item = u64>) -> Option<Percentiles> {
        let mut h = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)
            .expect("static histogram bounds are valid");
        for v in values {
            h.saturating_record(v.clamp(1, LATENCY_US_MAX));
        }
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Percentiles {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        })
    }

    /// `p50 <= p95 <= p99 <= max`.
    pub fn is_monotone(&self) -> bool {
        self.p50_ms <= self.p95_ms && self.p95_ms <= self.p99_ms && self.p99_ms <= self.max_ms
    }

    /// Each figure the median of that figure over `rounds` (the count is the
    /// total). Order is kept: a median of figures that are each ordered is
    /// ordered. None when there are no rounds.
    pub fn median_of(rounds: &[Percentiles]) -> Option<Percentiles> {
        if rounds.is_empty() {
            return None;
        }
        let m = |f: fn(&Percentiles) -> f64| median(rounds.iter().map(f));
        Some(Percentiles {
            count: rounds.iter().map(|p| p.count).sum(),
            p50_ms: m(|p| p.p50_ms),
            p95_ms: m(|p| p.p95_ms),
            p99_ms: m(|p| p.p99_ms),
            max_ms: m(|p| p.max_ms),
        })
    }
}

/// The median (the mean of the middle two for an even count); NaN for none.
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One point of latency over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimePoint {
    /// Start of the bin, in seconds after the first enqueue.
    pub t_s: f64,
    pub p95_ms: f64,
    pub count: u64,
}

/// The p95 of the latencies enqueued in each bin of `bin_ms`; bins with
/// fewer than `samples_min` latencies are left out. `samples` are
/// `(enqueued_ms, latency_us)`.
pub fn timeline_p95(samples: &[(f64, u64)], bin_ms: f64, samples_min: usize) -> Vec<TimePoint> {
    if samples.is_empty() || bin_ms.is_nan() || bin_ms <= 0.0 {
        return Vec::new();
    }
    let mut bins: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for &(at, us) in samples {
        let bin = (at.max(0.0) / bin_ms).floor() as u64;
        bins.entry(bin).or_default().push(us);
    }
    bins.into_iter()
        .filter(|(_, v)| v.len() >= samples_min.max(1))
        .filter_map(|(bin, v)| {
            let count = v.len() as u64;
            Percentiles::from_us(v).map(|p| TimePoint {
                t_s: bin as f64 * bin_ms / 1000.0,
                p95_ms: p.p95_ms,
                count,
            })
        })
        .collect()
}

/// `value / reference`, or NaN without a positive reference.
pub fn ratio(value: f64, reference: f64) -> f64 {
    if reference > 0.0 {
        value / reference
    } else {
        f64::NAN
    }
}

/// Whether latency climbed within a run: the p95 of the latencies enqueued
/// in the last third of `[from_ms, to_ms)` over the p95 of those enqueued in
/// its first third (`samples` are `(enqueued_ms, latency_us)`). NaN when a
/// third has no sample.
pub fn trend_ratio(samples: &[(f64, u64)], from_ms: f64, to_ms: f64) -> f64 {
    let third = (to_ms - from_ms) / 3.0;
    let p95_within = |lo: f64, hi: f64| {
        Percentiles::from_us(
            samples
                .iter()
                .filter(|(t, _)| *t >= lo && *t < hi)
                .map(|(_, us)| *us),
        )
        .map_or(f64::NAN, |p| p.p95_ms)
    };
    ratio(
        p95_within(to_ms - third, to_ms),
        p95_within(from_ms, from_ms + third),
    )
}

/// The p95s of one third of a run's quiet actions (by enqueue time), whole
/// and split at the claim, so a trend can be traced to the claim or to the
/// delivery.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ThirdP95 {
    pub count: usize,
    /// Enqueue to accepted.
    pub latency_ms: f64,
    /// Enqueue to claim (the part the claim decides).
    pub wait_ms: f64,
    /// Claim to accepted (the delivery: the provider's answer and the
    /// settle's commit), each action's latency less its wait.
    pub after_claim_ms: f64,
}

/// The p95s of each third of `[from_ms, to_ms)` (the thirds
/// [`trend_ratio`] compares); `samples` are `(enqueued_ms, latency_us,
/// wait_us)`. `None` for a third with no sample.
pub fn thirds_p95(samples: &[(f64, u64, u64)], from_ms: f64, to_ms: f64) -> Vec<Option<ThirdP95>> {
    let third = (to_ms - from_ms) / 3.0;
    (0..3)
        .map(|i| {
            let lo = from_ms + third * f64::from(i);
            let within: Vec<&(f64, u64, u64)> = samples
                .iter()
                .filter(|(t, _, _)| *t >= lo && *t < lo + third)
                .collect();
            let p95 = |f: &dyn Fn(&(f64, u64, u64)) -> u64| {
                Percentiles::from_us(within.iter().map(|s| f(s))).map(|p| p.p95_ms)
            };
            Some(ThirdP95 {
                count: within.len(),
                latency_ms: p95(&|s| s.1)?,
                wait_ms: p95(&|s| s.2)?,
                after_claim_ms: p95(&|s| s.1.saturating_sub(s.2))?,
            })
        })
        .collect()
}

/// The mean of a latency distribution, in milliseconds.
pub fn latency_mean_ms(l: &Latency) -> f64 {
    match *l {
        Latency::Fixed { ms } => ms as f64,
        Latency::Uniform { min_ms, max_ms } => (min_ms + max_ms) as f64 / 2.0,
        Latency::LogNormal { median_ms, sigma } => median_ms * (sigma * sigma / 2.0).exp(),
    }
}

/// How many workers with how many actions each, and how busy that makes them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    pub workers: u32,
    pub concurrency: u32,
    /// `workers * concurrency`: actions worked on at once.
    pub slots: u32,
    /// The time one action holds a slot, as planned: the provider's mean
    /// latency plus the database allowance.
    pub service_ms: f64,
    /// Actions per second offered in the baseline.
    pub offered_hz: f64,
    /// `offered * service / slots`.
    pub utilisation_planned: f64,
}

/// Picks the worker count and concurrency for a target utilisation. Given
/// both, it only computes the utilisation; given one, it sizes the other;
/// given neither, it picks the fewest slots that reach the target with 2 to
/// 8 workers, preferring a worker count near `workers_default`.
pub fn calibrate(
    offered_hz: f64,
    service_ms: f64,
    utilisation_target: f64,
    workers: Option<u32>,
    concurrency: Option<u32>,
    workers_default: u32,
) -> Result<Calibration, String> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(offered_hz) || !positive(service_ms) {
        return Err("the offered rate and the service time must be positive".into());
    }
    let in_range = utilisation_target > 0.0 && utilisation_target < 1.0;
    if !in_range {
        return Err(format!(
            "the utilisation target must be within (0, 1), got {utilisation_target}"
        ));
    }
    // Slots busy on average, and the slots that makes `target` of.
    let busy = offered_hz * service_ms / 1000.0;
    let needed = (busy / utilisation_target).ceil().max(1.0);
    let (w, c) = match (workers, concurrency) {
        (Some(w), Some(c)) => (w, c),
        (Some(w), None) => (w, (needed / f64::from(w.max(1))).ceil() as u32),
        (None, Some(c)) => ((needed / f64::from(c.max(1))).ceil() as u32, c),
        (None, None) => (2..=8u32)
            .map(|w| (w, (needed / f64::from(w)).ceil() as u32))
            .min_by_key(|(w, c)| (w * c, w.abs_diff(workers_default), *w))
            .unwrap_or((workers_default, 1)),
    };
    let (w, c) = (w.max(1), c.max(1));
    let slots = w.saturating_mul(c);
    Ok(Calibration {
        workers: w,
        concurrency: c,
        slots,
        service_ms,
        offered_hz,
        utilisation_planned: busy / f64::from(slots),
    })
}

/// The costliest statements of a run under a heading, one line each: calls
/// per action, mean microseconds executing, microseconds planning per call
/// (per call, not per plan (`mean_plan_time`): a statement whose plan is
/// cached plans on few of its calls), and the statement's first 80
/// characters.
pub fn statement_lines(
    heading: &str,
    stats: &[crate::views::StatementStat],
    actions: u64,
) -> String {
    let mut out = format!(
        "\ncostliest statements, {heading} (calls per action, mean us executing, us planning per call, buffers per call: in the cache + read):\n"
    );
    for st in stats {
        let q: String = st.query.chars().take(80).collect();
        out.push_str(&format!(
            "  {:>6.2} {:>8.0} {:>8.0} {:>7.0} + {:<5.0} {q}\n",
            st.calls as f64 / actions.max(1) as f64,
            st.mean_exec_us,
            st.total_plan_ms * 1000.0 / st.calls.max(1) as f64,
            st.shared_blks_hit as f64 / st.calls.max(1) as f64,
            st.shared_blks_read as f64 / st.calls.max(1) as f64
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_monotone_and_near_the_truth() {
        // 1..=1000 ms: p50 ~500, p95 ~950, p99 ~990.
        let p = Percentiles::from_us((1..=1000u64).map(|ms| ms * 1000)).unwrap();
        assert_eq!(p.count, 1000);
        assert!(p.is_monotone());
        assert!((p.p50_ms - 500.0).abs() < 2.0, "{p:?}");
        assert!((p.p95_ms - 950.0).abs() < 2.0, "{p:?}");
        assert!((p.p99_ms - 990.0).abs() < 2.0, "{p:?}");
        assert!((p.max_ms - 1000.0).abs() < 1.0, "{p:?}");
        assert_eq!(Percentiles::from_us(Vec::<u64>::new()), None);
    }

    #[test]
    fn medians_drop_one_outlying_round() {
        assert_eq!(median([3.0, 1.0, 100.0]), 3.0);
        assert_eq!(median([1.0, 2.0]), 1.5);
        assert!(median(Vec::<f64>::new()).is_nan());
        let p = |p50_ms, p95_ms, p99_ms| Percentiles {
            count: 10,
            p50_ms,
            p95_ms,
            p99_ms,
            max_ms: p99_ms + 1.0,
        };
        let m = Percentiles::median_of(&[
            p(10.0, 50.0, 90.0),
            p(12.0, 900.0, 990.0),
            p(9.0, 55.0, 80.0),
        ])
        .unwrap();
        assert_eq!(
            (m.count, m.p50_ms, m.p95_ms, m.p99_ms),
            (30, 10.0, 55.0, 90.0)
        );
        assert!(m.is_monotone());
        assert_eq!(Percentiles::median_of(&[]), None);
    }

    #[test]
    fn a_trend_compares_the_last_third_with_the_first() {
        // 10 ms in the first third, 30 ms in the last: 3x; flat: 1x.
        let climbing: Vec<(f64, u64)> = (0..300)
            .map(|i| (i as f64 * 10.0, if i < 100 { 10_000 } else { 30_000 }))
            .collect();
        assert!((trend_ratio(&climbing, 0.0, 3000.0) - 3.0).abs() < 0.01);
        let flat: Vec<(f64, u64)> = (0..300).map(|i| (i as f64 * 10.0, 20_000)).collect();
        assert!((trend_ratio(&flat, 0.0, 3000.0) - 1.0).abs() < 0.01);
        // Samples outside the window are left out; an empty third is NaN.
        assert!((trend_ratio(&climbing, 1000.0, 3000.0) - 1.0).abs() < 0.01);
        assert!(trend_ratio(&flat, 5000.0, 6000.0).is_nan());
    }

    #[test]
    fn thirds_split_a_trend_at_the_claim() {
        // The wait stays 2 ms; the delivery takes 20 ms, then 60 ms in the
        // last third: the climb is after the claim.
        let s: Vec<(f64, u64, u64)> = (0..300)
            .map(|i| {
                let after = if i < 200 { 20_000 } else { 60_000 };
                (i as f64 * 10.0, 2_000 + after, 2_000)
            })
            .collect();
        let t = thirds_p95(&s, 0.0, 3000.0);
        assert_eq!(t.len(), 3);
        let (first, last) = (t[0].unwrap(), t[2].unwrap());
        assert_eq!(first.count, 100);
        // Within the histogram's precision.
        let near = |a: f64, b: f64| (a - b).abs() < 0.1;
        assert!(near(first.wait_ms, 2.0) && near(last.wait_ms, 2.0), "{t:?}");
        assert!(
            near(first.after_claim_ms, 20.0) && near(last.after_claim_ms, 60.0),
            "{t:?}"
        );
        assert!(
            near(first.latency_ms, 22.0) && near(last.latency_ms, 62.0),
            "{t:?}"
        );
        // The same thirds as the trend's.
        let whole: Vec<(f64, u64)> = s.iter().map(|x| (x.0, x.1)).collect();
        let trend = trend_ratio(&whole, 0.0, 3000.0);
        assert!((trend - last.latency_ms / first.latency_ms).abs() < 1e-9);
        // An empty third is None.
        assert!(thirds_p95(&s, 0.0, 9000.0)[2].is_none());
    }

    #[test]
    fn timeline_bins_by_enqueue_time() {
        let mut s = Vec::new();
        for i in 0..100 {
            s.push((100.0 + i as f64, 10_000)); // bin 0: 10 ms
            s.push((1_100.0 + i as f64, 50_000)); // bin 1: 50 ms
        }
        s.push((2_500.0, 1_000)); // bin 2: one sample, left out
        let t = timeline_p95(&s, 1000.0, 5);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].t_s, t[0].count), (0.0, 100));
        assert!((t[0].p95_ms - 10.0).abs() < 0.1);
        assert_eq!(t[1].t_s, 1.0);
        assert!((t[1].p95_ms - 50.0).abs() < 0.1);
    }

    #[test]
    fn calibration_hits_the_target_from_above() {
        // 300/s * 30 ms = 9 slots busy; at 60% that needs 15 slots: 3 x 5
        // (5 x 3 is as near to 4 workers; fewer workers win the tie).
        let c = calibrate(300.0, 30.0, 0.6, None, None, 4).unwrap();
        assert_eq!((c.workers, c.concurrency, c.slots), (3, 5, 15));
        assert!((c.utilisation_planned - 0.6).abs() < 1e-9);
        // 200/s * 34 ms = 6.8 busy: 12 slots, 4 x 3.
        let c = calibrate(200.0, 34.0, 0.6, None, None, 4).unwrap();
        assert_eq!((c.workers, c.concurrency), (4, 3));
        let c = calibrate(300.0, 30.0, 0.6, Some(3), None, 4).unwrap();
        assert_eq!((c.workers, c.concurrency), (3, 5));
        let c = calibrate(300.0, 30.0, 0.6, None, Some(2), 4).unwrap();
        assert_eq!((c.workers, c.concurrency), (8, 2));
        let c = calibrate(300.0, 30.0, 0.6, Some(1), Some(9), 4).unwrap();
        assert!((c.utilisation_planned - 1.0).abs() < 1e-9);
        assert!(calibrate(300.0, 30.0, 1.0, None, None, 4).is_err());
        assert!(calibrate(0.0, 30.0, 0.6, None, None, 4).is_err());
    }

    #[test]
    fn lognormal_mean_is_above_its_median() {
        let m = latency_mean_ms(&Latency::LogNormal {
            median_ms: 25.0,
            sigma: 0.5,
        });
        assert!((m - 25.0 * (0.125f64).exp()).abs() < 1e-9);
        assert_eq!(latency_mean_ms(&Latency::Fixed { ms: 7 }), 7.0);
    }
}
