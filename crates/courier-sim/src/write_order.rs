//! Scene `write-order`: the idempotency key and the effect, written in which
//! order?
//!
//! # Model
//! A payment server handles `requests` requests, each with its own
//! idempotency key. Handling one is two writes, in an order fixed by the
//! design:
//! - `key-first`: store the key, then charge;
//! - `effect-first`: charge, then store the key;
//! - `one-transaction`: store the key and charge in one transaction (both or
//!   neither).
//!
//! Independently per request, with probability `crash_probability` the server
//! crashes in the gap between the two writes (for `one-transaction`, before
//! the commit, so nothing of the request survives). The client then retries
//! with the same key; the retry does not crash. A retry that finds the key
//! answers "already done" without charging; otherwise it runs the writes again.
//!
//! A payment is *silently lost* when it ends with no charge (yet the client
//! was told it was done) and *charged twice* when it ends with two. The same
//! crashes hit all three designs. Expected, per design: `requests ×
//! crash_probability` affected requests (500 of 5,000,000 at 1 in 10,000):
//! `key-first` loses them, `effect-first` charges them twice,
//! `one-transaction` does neither.
//!
//! Crashes are placed by drawing the gaps between them from the geometric
//! distribution (the number of requests before the next crash), which has the
//! same distribution as drawing every request and costs one draw per crash.
//!
//! # Invariants
//! - lost + once + charged twice = requests, for every design.
//! - `one-transaction` charges every request exactly once.

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::params::{Count, ParamSpec, Real};
use crate::{text, SimError};

pub const MODEL: &str = "Each request writes an idempotency key and a charge, in the design's order (or in one \
transaction). With probability crash_probability the server crashes between the two writes; the client retries with \
the same key and the retry does not crash. A retry that finds the key answers \"done\" without charging. The same \
crashes hit all three designs. Expected affected requests: requests × crash_probability, lost under key-first, \
charged twice under effect-first, none with one transaction.";

pub const REQUESTS: Count = Count {
    name: "requests",
    label: "Requests",
    min: 1,
    max: 100_000_000,
    default: 5_000_000,
    log: true,
    help: "How many payment requests the server handles.",
};
pub const CRASH_PROBABILITY: Real = Real {
    name: "crash_probability",
    label: "Crash probability in the gap",
    min: 0.0,
    max: 0.01,
    default: 0.0001,
    log: true,
    percent: true,
    help: "Probability that the server crashes between the two writes of one request.",
};

/// How many points the cumulative chart has.
const CHECKPOINTS: u64 = 50;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    pub requests: u64,
    pub crash_probability: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            requests: REQUESTS.default,
            crash_probability: CRASH_PROBABILITY.default,
        }
    }
}

impl Params {
    pub fn specs() -> Vec<ParamSpec> {
        vec![REQUESTS.spec(), CRASH_PROBABILITY.spec()]
    }

    pub fn validate(&self) -> Result<(), SimError> {
        REQUESTS.check(self.requests)?;
        CRASH_PROBABILITY.check(self.crash_probability)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Design {
    KeyFirst,
    EffectFirst,
    OneTransaction,
}

impl Design {
    pub const ALL: [Design; 3] = [
        Design::KeyFirst,
        Design::EffectFirst,
        Design::OneTransaction,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Design::KeyFirst => "key first, then charge",
            Design::EffectFirst => "charge first, then key",
            Design::OneTransaction => "key and charge in one transaction",
        }
    }
}

/// Handles one request, crashing in the gap if `crash`, then retrying once
/// with the same key. Returns how many times the card was charged.
fn handle(design: Design, crash: bool) -> u32 {
    let mut key_stored = false;
    let mut charges = 0;
    // The first attempt.
    match design {
        Design::KeyFirst => {
            key_stored = true;
            if !crash {
                charges += 1;
            }
        }
        Design::EffectFirst => {
            charges += 1;
            if !crash {
                key_stored = true;
            }
        }
        Design::OneTransaction => {
            if !crash {
                key_stored = true;
                charges += 1;
            }
        }
    }
    if !crash {
        return charges;
    }
    // The client's retry with the same key, which does not crash.
    if !key_stored {
        charges += 1;
    }
    charges
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DesignOutcome {
    pub design: Design,
    pub label: &'static str,
    pub lost: u64,
    pub charged_twice: u64,
    pub once: u64,
    /// Cumulative lost + charged twice at each checkpoint.
    pub series: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub requests: u64,
    pub crashes: u64,
    pub expected_affected: f64,
    pub designs: Vec<DesignOutcome>,
    /// Request counts at which the series were sampled.
    pub checkpoints: Vec<u64>,
    pub reading: String,
}

/// Positions (0-based) of the requests that crash, in order.
fn crash_positions(requests: u64, p: f64, rng: &mut StdRng) -> Vec<u64> {
    let mut out = Vec::new();
    if p <= 0.0 {
        return out;
    }
    let log_q = (-p).ln_1p(); // ln(1 − p) < 0
    let mut pos = 0u64;
    loop {
        let u = 1.0 - rng.random::<f64>(); // (0, 1]
        let gap = (u.ln() / log_q).floor();
        if gap.is_nan() || gap >= (requests - pos) as f64 {
            break;
        }
        pos += gap as u64;
        out.push(pos);
        pos += 1;
        if pos >= requests {
            break;
        }
    }
    out
}

pub fn run(params: &Params, seed: u64) -> Result<Outcome, SimError> {
    params.validate()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let crashes = crash_positions(params.requests, params.crash_probability, &mut rng);
    let n = params.requests;
    let checkpoints: Vec<u64> = (1..=CHECKPOINTS)
        .map(|i| (n * i).div_ceil(CHECKPOINTS))
        .collect();
    let designs: Vec<DesignOutcome> = Design::ALL
        .into_iter()
        .map(|design| {
            // Requests that do not crash are charged once in every design.
            debug_assert_eq!(handle(design, false), 1);
            let (mut lost, mut twice) = (0u64, 0u64);
            let mut series = Vec::with_capacity(checkpoints.len());
            let mut next = crashes.iter().peekable();
            for &c in &checkpoints {
                while let Some(&&pos) = next.peek() {
                    if pos >= c {
                        break;
                    }
                    next.next();
                    match handle(design, true) {
                        0 => lost += 1,
                        2 => twice += 1,
                        _ => {}
                    }
                }
                series.push(lost + twice);
            }
            DesignOutcome {
                design,
                label: design.label(),
                lost,
                charged_twice: twice,
                once: n - lost - twice,
                series,
            }
        })
        .collect();
    let expected = n as f64 * params.crash_probability;
    let reading = format!(
        "Of {} requests with a crash probability of {} in the gap, writing the key first silently lost {} payments, \
charging first charged {} twice, and one transaction did neither (the model expects {} each).",
        text::count(n),
        text::rate(params.crash_probability),
        text::count(designs[0].lost),
        text::count(designs[1].charged_twice),
        text::count(expected.round() as u64),
    );
    Ok(Outcome {
        requests: n,
        crashes: crashes.len() as u64,
        expected_affected: expected,
        designs,
        checkpoints,
        reading,
    })
}

impl Outcome {
    pub fn table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .designs
            .iter()
            .map(|d| {
                vec![
                    d.label.to_string(),
                    text::count(d.lost),
                    text::count(d.charged_twice),
                    text::count(d.once),
                ]
            })
            .collect();
        format!(
            "{} requests, {} crashes in the gap (model: {:.0})\n\n{}",
            text::count(self.requests),
            text::count(self.crashes),
            self.expected_affected,
            text::table(&["design", "lost", "charged twice", "once"], &rows)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::assert_binomial;
    use proptest::prelude::*;

    #[test]
    fn one_request_by_hand() {
        assert_eq!(handle(Design::KeyFirst, true), 0);
        assert_eq!(handle(Design::EffectFirst, true), 2);
        assert_eq!(handle(Design::OneTransaction, true), 1);
        for d in Design::ALL {
            assert_eq!(handle(d, false), 1);
        }
    }

    #[test]
    fn lesson_five_million_at_one_in_ten_thousand() {
        let p = Params::default();
        let o = run(&p, 12).unwrap();
        assert!((o.expected_affected - 500.0).abs() < 1e-6);
        assert_binomial("crashes", o.crashes, p.requests, p.crash_probability);
        assert_eq!(o.designs[0].lost, o.crashes);
        assert_eq!(o.designs[1].charged_twice, o.crashes);
        assert_eq!(o.designs[2].once, p.requests);
    }

    #[test]
    fn geometric_placement_matches_per_request_draws() {
        for (i, (n, p)) in [
            (200_000u64, 0.01),
            (1_000_000, 0.0005),
            (50, 0.01),
            (10_000, 0.0),
        ]
        .into_iter()
        .enumerate()
        {
            let o = run(
                &Params {
                    requests: n,
                    crash_probability: p,
                },
                40 + i as u64,
            )
            .unwrap();
            assert_binomial("crashes", o.crashes, n, p);
        }
        // Positions are uniform: about half the crashes fall in the first half.
        let mut rng = StdRng::seed_from_u64(3);
        let pos = crash_positions(1_000_000, 0.005, &mut rng);
        let first_half = pos.iter().filter(|&&x| x < 500_000).count() as u64;
        assert_binomial("first half", first_half, pos.len() as u64, 0.5);
        assert!(pos.windows(2).all(|w| w[0] < w[1]));
        assert!(pos.iter().all(|&x| x < 1_000_000));
    }

    #[test]
    fn series_is_cumulative_and_ends_at_the_total() {
        let o = run(
            &Params {
                requests: 100_000,
                crash_probability: 0.01,
            },
            1,
        )
        .unwrap();
        assert_eq!(o.checkpoints.len(), 50);
        assert_eq!(*o.checkpoints.last().unwrap(), 100_000);
        for d in &o.designs {
            assert!(d.series.windows(2).all(|w| w[0] <= w[1]));
            assert_eq!(*d.series.last().unwrap(), d.lost + d.charged_twice);
        }
    }

    #[test]
    fn determinism_and_bad_input() {
        let p = Params {
            requests: 100_000,
            crash_probability: 0.001,
        };
        assert_eq!(run(&p, 5).unwrap(), run(&p, 5).unwrap());
        assert_ne!(run(&p, 5).unwrap(), run(&p, 6).unwrap());
        for bad in [
            Params {
                requests: 0,
                ..p.clone()
            },
            Params {
                requests: REQUESTS.max + 1,
                ..p.clone()
            },
            Params {
                crash_probability: 0.5,
                ..p.clone()
            },
            Params {
                crash_probability: -1e-9,
                ..p.clone()
            },
        ] {
            assert!(run(&bad, 1).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn totals_add_up(requests in 1u64..200_000, p in 0.0f64..=0.01, seed: u64) {
            let o = run(&Params { requests, crash_probability: p }, seed).unwrap();
            for d in &o.designs {
                prop_assert_eq!(d.lost + d.once + d.charged_twice, requests);
            }
            prop_assert_eq!(o.designs[0].lost, o.crashes);
            prop_assert_eq!(o.designs[1].charged_twice, o.crashes);
            prop_assert_eq!(o.designs[2].once, requests);
            prop_assert!(o.crashes <= requests);
        }
    }
}
