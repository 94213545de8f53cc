//! Scene `repeats`: which operations do not mind being applied twice?
//!
//! # Model
//! Messages 1..=`messages` each credit `amount` to a balance, stated in one of
//! four ways:
//! - `increment`: `balance = balance + amount`;
//! - `set`: `balance = amount × i` (the absolute value the balance should have
//!   after message i);
//! - `insert-if-new`: insert a row keyed by the payment id `i` unless it
//!   exists, and credit `amount` only when the insert happened;
//! - `versioned`: `balance = amount × i` only if `i` is above the stored
//!   version, which then becomes `i`.
//!
//! Every message is delivered once, in order. With probability
//! `duplicate_rate` (independently per message) a copy is delivered too: right
//! after the original, or with probability `late_share` only after the next
//! message (and that message's own immediate copy). The last message's copy is
//! never late, because no message follows it. All four operations see the
//! same deliveries.
//!
//! A *duplicate effect* is a copy that changed the state. The exactly-once
//! balance after the first delivery of message k is `amount × k`; the state is
//! *off* by its difference from that. Expected values with N messages, rate d
//! and late share l:
//! - `increment`: N·d duplicate effects, final balance off by `amount × N·d`
//!   (1,000,000 messages, 1%, amount 10: 10,000 and 100,000);
//! - `set`: (N − 1)·d·l duplicate effects (each late copy puts back an older
//!   value until the next message arrives); the final balance is off only if
//!   message N − 1's copy is late and lands after the last message, by
//!   −amount with probability d·l;
//! - `insert-if-new` and `versioned`: no duplicate effects, off by 0.
//!
//! # Invariants
//! - `increment`'s final error is exactly `amount ×` its duplicate effects.
//! - `insert-if-new` and `versioned` never change state on a copy.
//! - `insert-if-new` and `versioned` always end with the exactly-once balance;
//!   `set` ends at most one message behind it.

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::params::{Choice, Count, ParamSpec, Real};
use crate::{text, SimError};

pub const MODEL: &str = "Each of N messages credits an amount, stated as an increment, as an absolute value (set), \
as an insert keyed by the payment id, or as a versioned update. Each message is delivered once and, with probability \
duplicate_rate, once more: right after the original, or (with probability late_share) after the next message. \
Expected duplicate effects: N × duplicate_rate for the increment (off by amount × that), (N − 1) × duplicate_rate × \
late_share for set (a stale value put back until the next message), zero for insert-if-new and versioned.";

pub const OPERATION: Choice = Choice {
    name: "operation",
    label: "Operation",
    choices: &["increment", "set", "insert-if-new", "versioned"],
    default: "increment",
    help: "How the message states its change.",
};
pub const MESSAGES: Count = Count {
    name: "messages",
    label: "Messages",
    min: 1,
    max: 5_000_000,
    default: 1_000_000,
    log: true,
    help: "How many distinct messages are sent.",
};
pub const DUPLICATE_RATE: Real = Real {
    name: "duplicate_rate",
    label: "Duplicate rate",
    min: 0.0,
    max: 0.5,
    default: 0.01,
    log: false,
    percent: true,
    help: "Probability that a message is delivered a second time.",
};
pub const AMOUNT: Count = Count {
    name: "amount",
    label: "Amount per message",
    min: 1,
    max: 1_000_000,
    default: 10,
    log: true,
    help: "What each message credits.",
};
pub const LATE_SHARE: Real = Real {
    name: "late_share",
    label: "Copies that arrive late",
    min: 0.0,
    max: 1.0,
    default: 0.0,
    log: false,
    percent: true,
    help: "Share of copies delivered after the next message instead of right away.",
};

/// How long the chart's series is: the error after every 1% of messages.
const CHECKPOINTS: u64 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    Increment,
    Set,
    InsertIfNew,
    Versioned,
}

impl Operation {
    pub const ALL: [Operation; 4] = [
        Operation::Increment,
        Operation::Set,
        Operation::InsertIfNew,
        Operation::Versioned,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Operation::Increment => "balance = balance + amount",
            Operation::Set => "balance = amount × i",
            Operation::InsertIfNew => "insert payment i if new",
            Operation::Versioned => "set if version i is newer",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    pub operation: Operation,
    pub messages: u64,
    pub duplicate_rate: f64,
    pub amount: u64,
    pub late_share: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            operation: Operation::Increment,
            messages: MESSAGES.default,
            duplicate_rate: DUPLICATE_RATE.default,
            amount: AMOUNT.default,
            late_share: LATE_SHARE.default,
        }
    }
}

impl Params {
    pub fn specs() -> Vec<ParamSpec> {
        vec![
            OPERATION.spec(),
            MESSAGES.spec(),
            DUPLICATE_RATE.spec(),
            AMOUNT.spec(),
            LATE_SHARE.spec(),
        ]
    }

    pub fn validate(&self) -> Result<(), SimError> {
        MESSAGES.check(self.messages)?;
        DUPLICATE_RATE.check(self.duplicate_rate)?;
        AMOUNT.check(self.amount)?;
        LATE_SHARE.check(self.late_share)
    }

    /// The model's expected duplicate effects for `op`.
    pub fn expected_duplicate_effects(&self, op: Operation) -> f64 {
        let n = self.messages as f64;
        match op {
            Operation::Increment => n * self.duplicate_rate,
            Operation::Set => (n - 1.0) * self.duplicate_rate * self.late_share,
            Operation::InsertIfNew | Operation::Versioned => 0.0,
        }
    }

    /// The model's expected final error for `op`.
    pub fn expected_final_off(&self, op: Operation) -> f64 {
        let a = self.amount as f64;
        match op {
            Operation::Increment => a * self.expected_duplicate_effects(op),
            // Only message N − 1's late copy can land after the last message.
            Operation::Set if self.messages >= 2 => -a * self.duplicate_rate * self.late_share,
            Operation::Set | Operation::InsertIfNew | Operation::Versioned => 0.0,
        }
    }
}

/// The state one operation keeps.
struct Ledger {
    op: Operation,
    balance: i64,
    version: u64,
    /// Payment ids seen, one bit each (insert-if-new).
    seen: Vec<u64>,
    duplicate_effects: u64,
    deliveries_wrong: u64,
}

impl Ledger {
    fn new(op: Operation, messages: u64) -> Ledger {
        let words = if op == Operation::InsertIfNew {
            (messages as usize).div_ceil(64) + 1
        } else {
            0
        };
        Ledger {
            op,
            balance: 0,
            version: 0,
            seen: vec![0; words],
            duplicate_effects: 0,
            deliveries_wrong: 0,
        }
    }

    /// Applies one delivery of message `i` and returns whether the state changed.
    fn apply(&mut self, i: u64, amount: i64) -> bool {
        let before = (self.balance, self.version);
        match self.op {
            Operation::Increment => self.balance += amount,
            Operation::Set => self.balance = amount * i as i64,
            Operation::InsertIfNew => {
                let (w, b) = ((i / 64) as usize, i % 64);
                if self.seen[w] & (1 << b) == 0 {
                    self.seen[w] |= 1 << b;
                    self.balance += amount;
                    return true;
                }
            }
            Operation::Versioned => {
                if i > self.version {
                    self.version = i;
                    self.balance = amount * i as i64;
                }
            }
        }
        (self.balance, self.version) != before
    }

    fn deliver(&mut self, i: u64, copy: bool, amount: i64, correct: i64) {
        let changed = self.apply(i, amount);
        if copy && changed {
            self.duplicate_effects += 1;
        }
        if self.balance != correct {
            self.deliveries_wrong += 1;
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperationOutcome {
    pub operation: Operation,
    pub label: &'static str,
    pub duplicate_effects: u64,
    pub expected_duplicate_effects: f64,
    /// Final balance minus the exactly-once balance.
    pub final_off: i64,
    pub expected_final_off: f64,
    /// Deliveries after which the balance was not the exactly-once balance.
    pub deliveries_wrong: u64,
    /// The error after each checkpoint (see `Outcome::checkpoints`).
    pub series: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub operation: Operation,
    pub messages: u64,
    pub deliveries: u64,
    pub copies: u64,
    pub late_copies: u64,
    /// The chosen operation's result (also in `by_operation`).
    pub chosen: OperationOutcome,
    pub by_operation: Vec<OperationOutcome>,
    /// Message numbers after which the series were sampled.
    pub checkpoints: Vec<u64>,
    pub reading: String,
}

pub fn run(params: &Params, seed: u64) -> Result<Outcome, SimError> {
    params.validate()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let n = params.messages;
    let amount = params.amount as i64;
    let mut ledgers: Vec<Ledger> = Operation::ALL
        .into_iter()
        .map(|op| Ledger::new(op, n))
        .collect();
    let mut series: Vec<Vec<i64>> = vec![Vec::new(); ledgers.len()];
    let mut checkpoints = Vec::new();
    let mut next_checkpoint = 1u64;
    let (mut deliveries, mut copies, mut late_copies) = (0u64, 0u64, 0u64);
    let mut pending_late: Option<u64> = None;

    let deliver_all = |i: u64, copy: bool, correct: i64, ledgers: &mut [Ledger]| {
        for l in ledgers.iter_mut() {
            l.deliver(i, copy, amount, correct);
        }
    };
    for i in 1..=n {
        let correct = amount * i as i64;
        deliver_all(i, false, correct, &mut ledgers);
        deliveries += 1;
        let mut late_now = false;
        if rng.random::<f64>() < params.duplicate_rate {
            copies += 1;
            deliveries += 1;
            if i < n && rng.random::<f64>() < params.late_share {
                late_copies += 1;
                late_now = true;
            } else {
                deliver_all(i, true, correct, &mut ledgers);
            }
        }
        // The previous message's late copy arrives now, after this message
        // and its immediate copy.
        if let Some(j) = pending_late.take() {
            deliver_all(j, true, correct, &mut ledgers);
        }
        if late_now {
            pending_late = Some(i);
        }
        if i * CHECKPOINTS >= next_checkpoint * n || i == n {
            checkpoints.push(i);
            for (s, l) in series.iter_mut().zip(&ledgers) {
                s.push(l.balance - correct);
            }
            while next_checkpoint * n <= i * CHECKPOINTS {
                next_checkpoint += 1;
            }
        }
    }
    debug_assert!(pending_late.is_none());
    let exact = amount * n as i64;
    let by_operation: Vec<OperationOutcome> = ledgers
        .iter()
        .zip(series)
        .map(|(l, series)| OperationOutcome {
            operation: l.op,
            label: l.op.label(),
            duplicate_effects: l.duplicate_effects,
            expected_duplicate_effects: params.expected_duplicate_effects(l.op),
            final_off: l.balance - exact,
            expected_final_off: params.expected_final_off(l.op),
            deliveries_wrong: l.deliveries_wrong,
            series,
        })
        .collect();
    let chosen = by_operation
        .iter()
        .find(|o| o.operation == params.operation)
        .cloned()
        .ok_or_else(|| SimError::BadParams("unknown operation".to_string()))?;
    let reading = format!(
        "With {} of {} messages delivered twice, “{}” produced {} duplicate effects and ended {} off \
(the model expects {} and {}).",
        text::rate(params.duplicate_rate),
        text::count(n),
        chosen.label.replace("amount", &params.amount.to_string()),
        text::count(chosen.duplicate_effects),
        text::signed(chosen.final_off),
        text::count(chosen.expected_duplicate_effects.round() as u64),
        text::signed(chosen.expected_final_off.round() as i64),
    );
    Ok(Outcome {
        operation: params.operation,
        messages: n,
        deliveries,
        copies,
        late_copies,
        chosen,
        by_operation,
        checkpoints,
        reading,
    })
}

impl Outcome {
    pub fn table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .by_operation
            .iter()
            .map(|o| {
                let mark = if o.operation == self.operation {
                    "> "
                } else {
                    "  "
                };
                vec![
                    format!("{mark}{}", o.label),
                    text::count(o.duplicate_effects),
                    text::count(o.expected_duplicate_effects.round() as u64),
                    text::signed(o.final_off),
                    text::count(o.deliveries_wrong),
                ]
            })
            .collect();
        format!(
            "{} messages, {} deliveries, {} copies ({} late)\n\n{}",
            text::count(self.messages),
            text::count(self.deliveries),
            text::count(self.copies),
            text::count(self.late_copies),
            text::table(
                &[
                    "operation",
                    "dup effects",
                    "model",
                    "final off",
                    "deliveries wrong"
                ],
                &rows
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::assert_binomial;
    use proptest::prelude::*;

    fn by(o: &Outcome, op: Operation) -> &OperationOutcome {
        o.by_operation.iter().find(|x| x.operation == op).unwrap()
    }

    #[test]
    fn lesson_increment_by_ten() {
        let p = Params::default();
        let o = run(&p, 77).unwrap();
        let inc = by(&o, Operation::Increment);
        assert_binomial(
            "increment dups",
            inc.duplicate_effects,
            p.messages,
            p.duplicate_rate,
        );
        assert_eq!(inc.final_off, 10 * inc.duplicate_effects as i64);
        assert!((inc.expected_final_off - 100_000.0).abs() < 1e-6);
        assert!((inc.expected_duplicate_effects - 10_000.0).abs() < 1e-6);
        for op in [Operation::Set, Operation::InsertIfNew, Operation::Versioned] {
            assert_eq!(by(&o, op).duplicate_effects, 0, "{op:?}");
            assert_eq!(by(&o, op).final_off, 0, "{op:?}");
            assert_eq!(by(&o, op).deliveries_wrong, 0, "{op:?}");
        }
    }

    #[test]
    fn late_copies_hurt_set_but_not_versioned() {
        for (i, (d, l)) in [(0.1, 0.5), (0.3, 1.0), (0.02, 0.25)]
            .into_iter()
            .enumerate()
        {
            let p = Params {
                operation: Operation::Set,
                messages: 40_000,
                duplicate_rate: d,
                amount: 7,
                late_share: l,
            };
            let o = run(&p, 500 + i as u64).unwrap();
            assert_binomial("copies", o.copies, p.messages, d);
            let set = by(&o, Operation::Set);
            assert_binomial("set dups", set.duplicate_effects, p.messages - 1, d * l);
            assert_eq!(set.duplicate_effects, o.late_copies);
            assert_eq!(set.deliveries_wrong, o.late_copies);
            assert!(set.final_off == 0 || set.final_off == -7);
            let inc = by(&o, Operation::Increment);
            assert_eq!(inc.duplicate_effects, o.copies);
            assert_eq!(inc.final_off, 7 * o.copies as i64);
            for op in [Operation::InsertIfNew, Operation::Versioned] {
                assert_eq!(by(&o, op).duplicate_effects, 0);
                assert_eq!(by(&o, op).final_off, 0);
            }
        }
    }

    #[test]
    fn set_ends_one_message_behind_when_the_last_late_copy_lands_at_the_end() {
        let p = Params {
            operation: Operation::Set,
            messages: 2,
            duplicate_rate: 0.5,
            amount: 3,
            late_share: 0.6,
        };
        let runs = 2_000u64;
        let behind = (0..runs)
            .filter(|&seed| run(&p, seed).unwrap().chosen.final_off == -3)
            .count() as u64;
        assert_binomial("set ends behind", behind, runs, 0.5 * 0.6);
        assert!((p.expected_final_off(Operation::Set) + 3.0 * 0.3).abs() < 1e-12);
    }

    #[test]
    fn series_has_a_point_per_percent_and_ends_at_the_final_error() {
        let p = Params {
            messages: 1_234,
            duplicate_rate: 0.2,
            ..Params::default()
        };
        let o = run(&p, 1).unwrap();
        assert_eq!(o.checkpoints.len(), 100);
        assert_eq!(*o.checkpoints.last().unwrap(), 1_234);
        for op in &o.by_operation {
            assert_eq!(op.series.len(), o.checkpoints.len());
            assert_eq!(*op.series.last().unwrap(), op.final_off);
        }
        // Increment's error never shrinks.
        let inc = &by(&o, Operation::Increment).series;
        assert!(inc.windows(2).all(|w| w[0] <= w[1]));
        let tiny = run(
            &Params {
                messages: 3,
                ..Params::default()
            },
            1,
        )
        .unwrap();
        assert_eq!(tiny.checkpoints, vec![1, 2, 3]);
    }

    #[test]
    fn same_seed_same_outcome_and_bad_input_refused() {
        let p = Params {
            messages: 2_000,
            duplicate_rate: 0.1,
            ..Params::default()
        };
        assert_eq!(run(&p, 8).unwrap(), run(&p, 8).unwrap());
        assert_ne!(run(&p, 8).unwrap(), run(&p, 9).unwrap());
        for bad in [
            Params {
                messages: 0,
                ..p.clone()
            },
            Params {
                messages: MESSAGES.max + 1,
                ..p.clone()
            },
            Params {
                duplicate_rate: 0.9,
                ..p.clone()
            },
            Params {
                amount: 0,
                ..p.clone()
            },
            Params {
                late_share: f64::NAN,
                ..p.clone()
            },
        ] {
            assert!(run(&bad, 1).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn only_increment_drifts(
            messages in 1u64..3_000, d in 0.0f64..=0.5, l in 0.0f64..=1.0, amount in 1u64..1000, seed: u64
        ) {
            let p = Params { operation: Operation::Increment, messages, duplicate_rate: d, amount, late_share: l };
            let o = run(&p, seed).unwrap();
            prop_assert_eq!(o.deliveries, messages + o.copies);
            prop_assert_eq!(by(&o, Operation::Increment).final_off, (amount * o.copies) as i64);
            for op in [Operation::InsertIfNew, Operation::Versioned] {
                prop_assert_eq!(by(&o, op).final_off, 0);
            }
            let set = by(&o, Operation::Set).final_off;
            prop_assert!(set == 0 || set == -(amount as i64));
            prop_assert_eq!(by(&o, Operation::Versioned).duplicate_effects, 0);
            prop_assert_eq!(by(&o, Operation::InsertIfNew).duplicate_effects, 0);
        }
    }
}
