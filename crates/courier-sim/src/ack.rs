//! Scene `ack`: acknowledge before the work, after it, or after it with a
//! dedup table written in the same transaction as the effect.
//!
//! # Model
//! `messages` messages pass through a consumer. Handling a message is two
//! steps, in an order fixed by the strategy:
//! - `ack-first`: acknowledge, then perform the effect;
//! - `ack-after`: perform the effect, then acknowledge;
//! - `dedup`: perform the effect and record the message id in a dedup table in
//!   one transaction (both or neither), then acknowledge. A delivery whose id
//!   is already in the table is acknowledged without a second effect.
//!
//! For each message, independently, the consumer crashes once with
//! probability `crash_rate`. A crash lands in the gap between the two steps
//! with probability `gap_share`, otherwise before the first step (then nothing
//! has happened yet). After a crash the broker redelivers the message if and
//! only if it was not acknowledged, and the redelivery runs without a crash.
//! The same crashes hit all three strategies (the same draws), so the
//! strategies differ only in what a crash does.
//!
//! A message is *lost* when it ends with no effect and *duplicated* when it
//! ends with two. Expected values, per million messages:
//! `ack-first` loses `10^6 × crash_rate × gap_share`, `ack-after` duplicates the
//! same number, `dedup` neither loses nor duplicates. At a 1% crash rate with
//! half the crashes in the gap that is 5,000 per million; with 100,000
//! messages the binomial standard deviation is about 22 events (224 per million).
//!
//! # Invariants
//! - Each message ends with 0, 1 or 2 effects: lost + once + duplicated = messages.
//! - `dedup` performs exactly one effect per message, crash or not.
//! - `ack-first` never duplicates and `ack-after` never loses.

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::params::{Count, ParamSpec, Real};
use crate::{text, SimError};

pub const MODEL: &str = "Each message is handled in two steps whose order depends on the strategy. \
With probability crash_rate the consumer crashes once while handling a message; the crash falls in the gap \
between the two steps with probability gap_share, otherwise before the first step. An unacknowledged message \
is redelivered and the redelivery does not crash. The same crashes hit all three strategies. Expected: \
ack-first loses, and ack-after duplicates, 1,000,000 × crash_rate × gap_share per million; dedup does neither.";

pub const MESSAGES: Count = Count {
    name: "messages",
    label: "Messages per strategy",
    min: 1,
    max: 1_000_000,
    default: 100_000,
    log: true,
    help: "How many messages each strategy handles (the same messages, the same crashes).",
};
pub const CRASH_RATE: Real = Real {
    name: "crash_rate",
    label: "Crash rate",
    min: 0.0,
    max: 0.5,
    default: 0.01,
    log: false,
    percent: true,
    help: "Probability that the consumer crashes while handling a message.",
};
pub const GAP_SHARE: Real = Real {
    name: "gap_share",
    label: "Crashes in the gap",
    min: 0.0,
    max: 1.0,
    default: 0.5,
    log: false,
    percent: true,
    help: "Share of crashes that land between the two steps, where they do harm.",
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    pub messages: u64,
    pub crash_rate: f64,
    pub gap_share: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            messages: MESSAGES.default,
            crash_rate: CRASH_RATE.default,
            gap_share: GAP_SHARE.default,
        }
    }
}

impl Params {
    pub fn specs() -> Vec<ParamSpec> {
        vec![CRASH_RATE.spec(), GAP_SHARE.spec(), MESSAGES.spec()]
    }

    pub fn validate(&self) -> Result<(), SimError> {
        MESSAGES.check(self.messages)?;
        CRASH_RATE.check(self.crash_rate)?;
        GAP_SHARE.check(self.gap_share)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    AckFirst,
    AckAfter,
    Dedup,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::AckFirst, Strategy::AckAfter, Strategy::Dedup];

    pub fn label(self) -> &'static str {
        match self {
            Strategy::AckFirst => "ack first",
            Strategy::AckAfter => "ack after",
            Strategy::Dedup => "ack after + dedup table",
        }
    }

    fn steps(self) -> [Step; 2] {
        match self {
            Strategy::AckFirst => [Step::Ack, Step::Effect],
            Strategy::AckAfter => [Step::Effect, Step::Ack],
            Strategy::Dedup => [Step::EffectWithRecord, Step::Ack],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Ack,
    Effect,
    /// The effect and the dedup record, in one transaction.
    EffectWithRecord,
}

/// Where a crash interrupts the handling of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    BeforeFirstStep,
    InGap,
}

/// What one message's handling leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Handled {
    effects: u32,
    redelivered: bool,
}

/// Runs one message through a strategy: the first delivery (interrupted by
/// `crash`, if any), then a redelivery if it was not acknowledged.
fn handle(strategy: Strategy, crash: Option<Crash>) -> Handled {
    let steps = strategy.steps();
    let mut effects = 0u32;
    let mut acked = false;
    let mut recorded = false;
    let stop_before = match crash {
        None => steps.len(),
        Some(Crash::BeforeFirstStep) => 0,
        Some(Crash::InGap) => 1,
    };
    let mut apply = |step: Step, effects: &mut u32, acked: &mut bool| match step {
        Step::Ack => *acked = true,
        Step::Effect => *effects += 1,
        Step::EffectWithRecord => {
            if !recorded {
                recorded = true;
                *effects += 1;
            }
        }
    };
    for &step in &steps[..stop_before] {
        apply(step, &mut effects, &mut acked);
    }
    let redelivered = !acked;
    if redelivered {
        for &step in &steps {
            apply(step, &mut effects, &mut acked);
        }
    }
    debug_assert!(acked && effects <= 2);
    Handled {
        effects,
        redelivered,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyOutcome {
    pub strategy: Strategy,
    pub label: &'static str,
    /// Messages that ended with exactly one effect.
    pub once: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub redelivered: u64,
    pub lost_per_million: f64,
    pub duplicated_per_million: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub messages: u64,
    pub crashes: u64,
    pub crashes_in_gap: u64,
    /// One entry per strategy, in [`Strategy::ALL`] order (the chart's bars).
    pub strategies: Vec<StrategyOutcome>,
    /// The model's expected losses of ack-first (and duplicates of ack-after) per million.
    pub expected_per_million: f64,
    pub reading: String,
}

pub fn run(params: &Params, seed: u64) -> Result<Outcome, SimError> {
    params.validate()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tallies = [[0u64; 4]; 3]; // per strategy: effects 0, 1, 2, redelivered
    let (mut crashes, mut in_gap) = (0u64, 0u64);
    for _ in 0..params.messages {
        let crash = if rng.random::<f64>() < params.crash_rate {
            crashes += 1;
            if rng.random::<f64>() < params.gap_share {
                in_gap += 1;
                Some(Crash::InGap)
            } else {
                Some(Crash::BeforeFirstStep)
            }
        } else {
            None
        };
        for (i, strategy) in Strategy::ALL.into_iter().enumerate() {
            let h = handle(strategy, crash);
            tallies[i][h.effects as usize] += 1;
            tallies[i][3] += u64::from(h.redelivered);
        }
    }
    let per_million = |n: u64| n as f64 * 1e6 / params.messages as f64;
    let strategies: Vec<StrategyOutcome> = Strategy::ALL
        .into_iter()
        .zip(tallies)
        .map(|(strategy, t)| {
            debug_assert_eq!(t[0] + t[1] + t[2], params.messages);
            StrategyOutcome {
                strategy,
                label: strategy.label(),
                once: t[1],
                lost: t[0],
                duplicated: t[2],
                redelivered: t[3],
                lost_per_million: per_million(t[0]),
                duplicated_per_million: per_million(t[2]),
            }
        })
        .collect();
    let expected_per_million = 1e6 * params.crash_rate * params.gap_share;
    let reading = format!(
        "With {} of messages crashing and {} of those crashes in the gap, acknowledging first lost {} per million, \
acknowledging after duplicated {} per million, and the dedup table did neither (the model expects {} per million).",
        text::rate(params.crash_rate),
        text::rate(params.gap_share),
        text::per_million(strategies[0].lost_per_million),
        text::per_million(strategies[1].duplicated_per_million),
        text::per_million(expected_per_million),
    );
    Ok(Outcome {
        messages: params.messages,
        crashes,
        crashes_in_gap: in_gap,
        strategies,
        expected_per_million,
        reading,
    })
}

impl Outcome {
    pub fn table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .strategies
            .iter()
            .map(|s| {
                vec![
                    s.label.to_string(),
                    text::count(s.lost),
                    text::count(s.duplicated),
                    text::per_million(s.lost_per_million),
                    text::per_million(s.duplicated_per_million),
                ]
            })
            .collect();
        format!(
            "{} messages, {} crashes, {} in the gap\n\n{}",
            text::count(self.messages),
            text::count(self.crashes),
            text::count(self.crashes_in_gap),
            text::table(
                &["strategy", "lost", "duplicated", "lost/M", "duplicated/M"],
                &rows
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Strategy;
    use super::*;
    use crate::check::assert_binomial;
    use proptest::prelude::*;

    #[test]
    fn one_message_by_hand() {
        use Crash::*;
        let effects = |s, c| handle(s, c).effects;
        assert_eq!(effects(Strategy::AckFirst, Some(InGap)), 0);
        assert_eq!(effects(Strategy::AckAfter, Some(InGap)), 2);
        assert_eq!(effects(Strategy::Dedup, Some(InGap)), 1);
        for s in Strategy::ALL {
            assert_eq!(effects(s, None), 1);
            assert_eq!(effects(s, Some(BeforeFirstStep)), 1);
            assert!(handle(s, Some(BeforeFirstStep)).redelivered);
        }
        assert!(!handle(Strategy::AckFirst, Some(InGap)).redelivered);
        assert!(handle(Strategy::Dedup, Some(InGap)).redelivered);
    }

    #[test]
    fn lesson_figures_at_one_percent_and_half_in_the_gap() {
        let p = Params::default();
        let o = run(&p, 42).unwrap();
        let q = p.crash_rate * p.gap_share;
        assert_binomial("ack-first lost", o.strategies[0].lost, p.messages, q);
        assert_binomial(
            "ack-after duplicated",
            o.strategies[1].duplicated,
            p.messages,
            q,
        );
        assert_eq!(o.strategies[2].lost + o.strategies[2].duplicated, 0);
        assert!((o.expected_per_million - 5_000.0).abs() < 1e-6);
    }

    #[test]
    fn sampled_rates_match_the_model_at_several_settings() {
        for (i, (crash_rate, gap_share)) in [(0.05, 0.2), (0.3, 0.9), (0.001, 1.0), (0.2, 0.0)]
            .into_iter()
            .enumerate()
        {
            let p = Params {
                messages: 50_000,
                crash_rate,
                gap_share,
            };
            let o = run(&p, 100 + i as u64).unwrap();
            let q = crash_rate * gap_share;
            assert_binomial("crashes", o.crashes, p.messages, crash_rate);
            assert_binomial("ack-first lost", o.strategies[0].lost, p.messages, q);
            assert_binomial("ack-after dup", o.strategies[1].duplicated, p.messages, q);
            // Every crash, wherever it falls, leaves an unacknowledged message
            // under ack-after and dedup, except none; under ack-first only the
            // crash before the first step is redelivered.
            assert_eq!(o.strategies[1].redelivered, o.crashes);
            assert_eq!(o.strategies[0].redelivered, o.crashes - o.crashes_in_gap);
        }
    }

    #[test]
    fn same_seed_same_outcome() {
        let p = Params {
            messages: 5_000,
            ..Params::default()
        };
        assert_eq!(run(&p, 9).unwrap(), run(&p, 9).unwrap());
        assert_ne!(run(&p, 9).unwrap(), run(&p, 10).unwrap());
    }

    #[test]
    fn bad_parameters_are_refused() {
        let bad = [
            Params {
                messages: 0,
                ..Params::default()
            },
            Params {
                messages: MESSAGES.max + 1,
                ..Params::default()
            },
            Params {
                crash_rate: -0.1,
                ..Params::default()
            },
            Params {
                crash_rate: f64::NAN,
                ..Params::default()
            },
            Params {
                gap_share: 1.5,
                ..Params::default()
            },
        ];
        for p in bad {
            assert!(
                matches!(run(&p, 1), Err(SimError::OutOfRange { .. })),
                "{p:?}"
            );
        }
        assert!(Params::default().validate().is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn invariants_hold_for_any_valid_parameters(
            messages in 1u64..3_000, crash_rate in 0.0f64..=0.5, gap_share in 0.0f64..=1.0, seed: u64
        ) {
            let o = run(&Params { messages, crash_rate, gap_share }, seed).unwrap();
            for s in &o.strategies {
                prop_assert_eq!(s.lost + s.once + s.duplicated, messages);
            }
            prop_assert_eq!(o.strategies[0].duplicated, 0);
            prop_assert_eq!(o.strategies[1].lost, 0);
            prop_assert_eq!(o.strategies[2].once, messages);
            // The same crashes: what ack-first loses, ack-after duplicates.
            prop_assert_eq!(o.strategies[0].lost, o.crashes_in_gap);
            prop_assert_eq!(o.strategies[1].duplicated, o.crashes_in_gap);
        }
    }
}
