//! Scene `key-lifetime`: how many retries arrive after their idempotency key
//! was forgotten?
//!
//! # Model
//! A server remembers each idempotency key for `key_lifetime_s` seconds after
//! the first request. The delay from the first request to its retry is
//! log-normal: `delay = median_delay_s × exp(sigma × Z)` with `Z` standard
//! normal, so half the retries come back within the median and a few come
//! back much later (a phone that was offline for hours). A retry that arrives
//! after the key expired (`delay > key_lifetime_s`) looks new and runs again.
//! `retries` delays are drawn with a seeded generator.
//!
//! Expected share of late retries:
//! `P(delay > L) = 1 − Φ(ln(L / median) / sigma)`. With L = 5 min, a median of
//! 1 min and sigma = 1.6 that is `1 − Φ(1.0059) ≈ 0.157`; with 60,000 retries
//! the binomial standard deviation is 0.15 percentage points.
//!
//! The series for the chart reuses the same draws for a grid of lifetimes from
//! 1 s to 30 days, next to the closed form at each.
//!
//! # Invariants
//! - The late share never grows with a longer lifetime (same draws, sorted).
//! - `late ≤ retries`, and the late share equals `late / retries`.

use rand::{rngs::StdRng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::params::{Count, ParamSpec, Real};
use crate::{normal, text, SimError};

pub const MODEL: &str = "Retry delays are log-normal: delay = median_delay_s × exp(sigma × Z), Z standard normal. \
A key is remembered for key_lifetime_s after the first request; a retry with a longer delay finds no key and runs again. \
Expected late share: 1 − Φ(ln(key_lifetime_s / median_delay_s) / sigma).";

pub const RETRIES: Count = Count {
    name: "retries",
    label: "Retries",
    min: 1,
    max: 1_000_000,
    default: 60_000,
    log: true,
    help: "How many retry delays to draw.",
};
pub const MEDIAN_DELAY_S: Real = Real {
    name: "median_delay_s",
    label: "Typical (median) retry delay",
    min: 1.0,
    max: 86_400.0,
    default: 60.0,
    log: true,
    percent: false,
    help: "Half of all retries arrive within this many seconds.",
};
pub const SIGMA: Real = Real {
    name: "sigma",
    label: "Spread of delays (σ)",
    min: 0.1,
    max: 4.0,
    default: 1.6,
    log: false,
    percent: false,
    help: "The log-normal shape: larger means a heavier tail of late retries.",
};
pub const KEY_LIFETIME_S: Real = Real {
    name: "key_lifetime_s",
    label: "Key lifetime",
    min: 1.0,
    max: 2_592_000.0,
    default: 300.0,
    log: true,
    percent: false,
    help: "How long the server remembers a key (Stripe: at least 24 h; SQS FIFO: 5 min).",
};

/// The chart's lifetimes: 8 points per decade from 1 s to 30 days.
const GRID_POINTS_PER_DECADE: u32 = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    pub retries: u64,
    pub median_delay_s: f64,
    pub sigma: f64,
    pub key_lifetime_s: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            retries: RETRIES.default,
            median_delay_s: MEDIAN_DELAY_S.default,
            sigma: SIGMA.default,
            key_lifetime_s: KEY_LIFETIME_S.default,
        }
    }
}

impl Params {
    pub fn specs() -> Vec<ParamSpec> {
        vec![
            KEY_LIFETIME_S.spec(),
            MEDIAN_DELAY_S.spec(),
            SIGMA.spec(),
            RETRIES.spec(),
        ]
    }

    pub fn validate(&self) -> Result<(), SimError> {
        RETRIES.check(self.retries)?;
        MEDIAN_DELAY_S.check(self.median_delay_s)?;
        SIGMA.check(self.sigma)?;
        KEY_LIFETIME_S.check(self.key_lifetime_s)
    }
}

/// The closed form: the share of retries later than `lifetime_s`.
pub fn expected_late_share(lifetime_s: f64, median_delay_s: f64, sigma: f64) -> f64 {
    1.0 - normal::cdf((lifetime_s / median_delay_s).ln() / sigma)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub key_lifetime_s: f64,
    pub late_share: f64,
    pub expected_late_share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub retries: u64,
    pub late: u64,
    pub late_share: f64,
    pub expected_late_share: f64,
    /// Sampled delay percentiles, seconds.
    pub delay_p50_s: f64,
    pub delay_p99_s: f64,
    pub delay_p999_s: f64,
    pub delay_max_s: f64,
    /// Late share over a grid of lifetimes (same draws), for the chart.
    pub series: Vec<Point>,
    pub reading: String,
}

pub fn run(params: &Params, seed: u64) -> Result<Outcome, SimError> {
    params.validate()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let n = params.retries as usize;
    let mut delays = Vec::with_capacity(n + 1);
    while delays.len() < n {
        let (a, b) = normal::draw_pair(&mut rng);
        delays.push(params.median_delay_s * (params.sigma * a).exp());
        delays.push(params.median_delay_s * (params.sigma * b).exp());
    }
    delays.truncate(n);
    delays.sort_by(f64::total_cmp);
    let late_after = |lifetime: f64| (n - delays.partition_point(|&d| d <= lifetime)) as u64;
    let late = late_after(params.key_lifetime_s);
    let share = |k: u64| k as f64 / n as f64;
    let quantile = |q: f64| delays[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];

    let decades = (KEY_LIFETIME_S.max / KEY_LIFETIME_S.min).log10();
    let steps = (decades * f64::from(GRID_POINTS_PER_DECADE)).ceil() as u32;
    let series = (0..=steps)
        .map(|i| {
            let lifetime = (KEY_LIFETIME_S.min
                * 10f64.powf(f64::from(i) / f64::from(GRID_POINTS_PER_DECADE)))
            .min(KEY_LIFETIME_S.max);
            Point {
                key_lifetime_s: lifetime,
                late_share: share(late_after(lifetime)),
                expected_late_share: expected_late_share(
                    lifetime,
                    params.median_delay_s,
                    params.sigma,
                ),
            }
        })
        .collect();

    let expected = expected_late_share(params.key_lifetime_s, params.median_delay_s, params.sigma);
    let reading = format!(
        "With keys kept for {} and a typical retry delay of {} (σ = {}), {} of {} retries arrived after their key \
had expired and ran a second time (the model expects {}).",
        text::duration_s(params.key_lifetime_s),
        text::duration_s(params.median_delay_s),
        params.sigma,
        text::pct(share(late), 2),
        text::count(params.retries),
        text::pct(expected, 2),
    );
    Ok(Outcome {
        retries: params.retries,
        late,
        late_share: share(late),
        expected_late_share: expected,
        delay_p50_s: quantile(0.5),
        delay_p99_s: quantile(0.99),
        delay_p999_s: quantile(0.999),
        delay_max_s: delays[n - 1],
        series,
        reading,
    })
}

impl Outcome {
    pub fn table(&self) -> String {
        let rows = vec![
            vec!["retries".to_string(), text::count(self.retries)],
            vec![
                "arrived after the key expired".to_string(),
                text::count(self.late),
            ],
            vec!["late share".to_string(), text::pct(self.late_share, 2)],
            vec![
                "late share, model".to_string(),
                text::pct(self.expected_late_share, 2),
            ],
            vec![
                "median delay".to_string(),
                text::duration_s(self.delay_p50_s),
            ],
            vec![
                "99th percentile delay".to_string(),
                text::duration_s(self.delay_p99_s),
            ],
            vec![
                "99.9th percentile delay".to_string(),
                text::duration_s(self.delay_p999_s),
            ],
            vec![
                "longest delay".to_string(),
                text::duration_s(self.delay_max_s),
            ],
        ];
        let mut out = text::table(&["", "value"], &rows);
        out.push_str("\nlate share by key lifetime\n");
        let grid: Vec<Vec<String>> = self
            .series
            .iter()
            .step_by(4)
            .map(|p| {
                vec![
                    text::duration_s(p.key_lifetime_s),
                    text::pct(p.late_share, 3),
                    text::pct(p.expected_late_share, 3),
                ]
            })
            .collect();
        out.push_str(&text::table(&["lifetime", "late", "model"], &grid));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::assert_share;
    use proptest::prelude::*;

    #[test]
    fn closed_form_by_hand() {
        // ln(5)/1.6 = 1.00589...; 1 − Φ(1.00589) = 0.15725 from normal tables.
        let p = expected_late_share(300.0, 60.0, 1.6);
        assert!((p - 0.157_25).abs() < 5e-5, "{p}");
        // At the median, half are late.
        assert!((expected_late_share(60.0, 60.0, 1.6) - 0.5).abs() < 1e-7);
    }

    #[test]
    fn lesson_setting_matches_the_closed_form() {
        let p = Params::default();
        let o = run(&p, 2024).unwrap();
        assert_share(
            "late share",
            o.late_share,
            p.retries,
            o.expected_late_share,
            0.0,
        );
        assert_eq!(o.late_share, o.late as f64 / p.retries as f64);
    }

    #[test]
    fn sampled_share_matches_at_several_settings() {
        let settings = [
            (86_400.0, 60.0, 1.6),
            (600.0, 60.0, 0.5),
            (30.0, 120.0, 2.5),
            (3_600.0, 300.0, 1.0),
        ];
        for (i, (lifetime, median, sigma)) in settings.into_iter().enumerate() {
            let p = Params {
                retries: 40_000,
                median_delay_s: median,
                sigma,
                key_lifetime_s: lifetime,
            };
            let o = run(&p, i as u64).unwrap();
            let want = expected_late_share(lifetime, median, sigma);
            assert_share("late share", o.late_share, p.retries, want, 0.0);
            // The sample median of n standard normals has a standard deviation
            // of sqrt(pi / 2n); on the log scale the delays' median is that
            // times sigma away from ln(median).
            let z = (o.delay_p50_s / median).ln() / sigma;
            let sd = (std::f64::consts::PI / (2.0 * p.retries as f64)).sqrt();
            assert!(z.abs() < 4.0 * sd, "sample median off by {z} sd units");
        }
    }

    #[test]
    fn series_covers_the_range_and_never_rises() {
        let o = run(
            &Params {
                retries: 5_000,
                ..Params::default()
            },
            5,
        )
        .unwrap();
        assert_eq!(o.series.first().unwrap().key_lifetime_s, KEY_LIFETIME_S.min);
        assert_eq!(o.series.last().unwrap().key_lifetime_s, KEY_LIFETIME_S.max);
        for w in o.series.windows(2) {
            assert!(w[1].late_share <= w[0].late_share);
            assert!(w[1].expected_late_share <= w[0].expected_late_share + 1e-12);
        }
    }

    #[test]
    fn same_seed_same_outcome_and_bad_input_refused() {
        let p = Params {
            retries: 1_000,
            ..Params::default()
        };
        assert_eq!(run(&p, 3).unwrap(), run(&p, 3).unwrap());
        assert_ne!(run(&p, 3).unwrap(), run(&p, 4).unwrap());
        for bad in [
            Params {
                retries: 0,
                ..p.clone()
            },
            Params {
                retries: 2_000_000,
                ..p.clone()
            },
            Params {
                sigma: 0.0,
                ..p.clone()
            },
            Params {
                median_delay_s: f64::INFINITY,
                ..p.clone()
            },
            Params {
                key_lifetime_s: -1.0,
                ..p.clone()
            },
        ] {
            assert!(run(&bad, 1).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn late_count_is_consistent(
            retries in 1u64..2_000, median in 1.0f64..1000.0, sigma in 0.1f64..4.0,
            lifetime in 1.0f64..100_000.0, seed: u64,
        ) {
            let o = run(&Params { retries, median_delay_s: median, sigma, key_lifetime_s: lifetime }, seed).unwrap();
            prop_assert!(o.late <= retries);
            prop_assert!(o.delay_p50_s <= o.delay_p99_s && o.delay_p99_s <= o.delay_max_s);
            prop_assert!((0.0..=1.0).contains(&o.expected_late_share));
        }
    }
}
