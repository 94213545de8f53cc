//! Scene `crash-points`: every place a read-process-write loop can crash,
//! and what each crash leaves behind.
//!
//! # Model
//! A worker consumes messages 1..=`messages` from an input log and, for each,
//! runs the steps of its design:
//! - `write-then-commit`: read, write the output record, commit the offset;
//! - `commit-then-write`: read, commit the offset, write the output record;
//! - `transactional`: read, begin a transaction, write the output record in
//!   it, add the input offset to it, commit (both become visible together, or
//!   neither: Kafka's exactly-once processing, KIP-98);
//! - `external-effect`: the transactional loop plus a call to an outside
//!   system (a payment API) after beginning the transaction.
//!
//! The durable state is the committed offset, the visible output records, the
//! open transaction and the outside system's effects. The worker's position
//! and the message it has read are in memory. A crash loses the memory and
//! aborts an open transaction; the restarted worker resumes from the committed
//! offset and runs to the end without crashing.
//!
//! Every crash point is enumerated: a crash after step k of the run, for every
//! k from 1 to the number of steps. For each, the run is replayed and each
//! message's *effects* are counted (visible output records; for
//! `external-effect`, calls to the outside system). A point is a *loss* if some
//! message has no effect, a *duplicate* if some message has two, otherwise
//! *nothing*.
//!
//! Counted by hand, per message: `write-then-commit` has one duplicate point
//! (after writing, before committing), `commit-then-write` one loss point
//! (after committing, before writing), `transactional` none, and
//! `external-effect` three duplicate points (after the call and before the
//! commit: the transaction aborts, the call does not).
//!
//! # Invariants
//! - Without a crash every design produces exactly one effect per message.
//! - A transaction's output is visible only together with its offset.

use serde::{Deserialize, Serialize};

use crate::params::{Choice, Count, ParamSpec};
use crate::{text, SimError};

pub const MODEL: &str = "A worker reads each message, processes it and writes an output, in the order its design \
says. Durable: the committed offset, visible outputs, an open transaction, calls to outside systems. In memory: \
the worker's position. A crash loses memory and aborts an open transaction; the worker restarts from the committed \
offset. Every crash point (after each step) is replayed and each message's effects counted: none is a loss, two a duplicate.";

pub const DESIGN: Choice = Choice {
    name: "design",
    label: "Design",
    choices: &[
        "write-then-commit",
        "commit-then-write",
        "transactional",
        "external-effect",
    ],
    default: "write-then-commit",
    help: "The order of the loop's steps.",
};
pub const MESSAGES: Count = Count {
    name: "messages",
    label: "Messages in the run",
    min: 1,
    max: 4,
    default: 1,
    log: false,
    help: "How many messages the loop consumes; every step of every message is a crash point.",
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Design {
    WriteThenCommit,
    CommitThenWrite,
    Transactional,
    ExternalEffect,
}

impl Design {
    pub const ALL: [Design; 4] = [
        Design::WriteThenCommit,
        Design::CommitThenWrite,
        Design::Transactional,
        Design::ExternalEffect,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Design::WriteThenCommit => "write the output, then commit the offset",
            Design::CommitThenWrite => "commit the offset, then write the output",
            Design::Transactional => "output and offset in one transaction",
            Design::ExternalEffect => "one transaction plus an outside call",
        }
    }

    fn steps(self) -> &'static [Step] {
        use Step::*;
        match self {
            Design::WriteThenCommit => &[Read, WriteOutput, CommitOffset],
            Design::CommitThenWrite => &[Read, CommitOffset, WriteOutput],
            Design::Transactional => &[Read, BeginTxn, WriteOutputInTxn, AddOffsetToTxn, CommitTxn],
            Design::ExternalEffect => &[
                Read,
                BeginTxn,
                CallOutside,
                WriteOutputInTxn,
                AddOffsetToTxn,
                CommitTxn,
            ],
        }
    }

    /// Whether the effect that counts is the outside call.
    fn counts_outside_calls(self) -> bool {
        self == Design::ExternalEffect
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Read,
    WriteOutput,
    CommitOffset,
    BeginTxn,
    WriteOutputInTxn,
    AddOffsetToTxn,
    CommitTxn,
    CallOutside,
}

impl Step {
    pub fn label(self) -> &'static str {
        match self {
            Step::Read => "read the message",
            Step::WriteOutput => "write the output",
            Step::CommitOffset => "commit the offset",
            Step::BeginTxn => "begin the transaction",
            Step::WriteOutputInTxn => "write the output (in the transaction)",
            Step::AddOffsetToTxn => "add the offset to the transaction",
            Step::CommitTxn => "commit the transaction",
            Step::CallOutside => "call the payment API",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Harm {
    Nothing,
    Duplicate,
    Loss,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    pub design: Design,
    pub messages: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            design: Design::WriteThenCommit,
            messages: MESSAGES.default,
        }
    }
}

impl Params {
    pub fn specs() -> Vec<ParamSpec> {
        vec![DESIGN.spec(), MESSAGES.spec()]
    }

    pub fn validate(&self) -> Result<(), SimError> {
        MESSAGES.check(self.messages)
    }
}

/// What survives a crash.
#[derive(Debug, Default)]
struct Durable {
    committed_offset: usize,
    outputs: Vec<usize>,
    open_txn: Option<Txn>,
    outside_calls: Vec<usize>,
}

#[derive(Debug, Default)]
struct Txn {
    outputs: Vec<usize>,
    offset: Option<usize>,
}

impl Durable {
    fn apply(&mut self, step: Step, message: usize) {
        match step {
            Step::Read => {}
            Step::WriteOutput => self.outputs.push(message),
            Step::CommitOffset => self.committed_offset = message + 1,
            Step::BeginTxn => self.open_txn = Some(Txn::default()),
            Step::WriteOutputInTxn => {
                if let Some(t) = self.open_txn.as_mut() {
                    t.outputs.push(message);
                }
            }
            Step::AddOffsetToTxn => {
                if let Some(t) = self.open_txn.as_mut() {
                    t.offset = Some(message + 1);
                }
            }
            Step::CommitTxn => {
                if let Some(t) = self.open_txn.take() {
                    // Visible together or not at all.
                    self.outputs.extend(t.outputs);
                    if let Some(o) = t.offset {
                        self.committed_offset = o;
                    }
                }
            }
            Step::CallOutside => self.outside_calls.push(message),
        }
    }
}

/// Runs the loop over `messages` messages, crashing after `crash_after`
/// steps (if given), restarting, and running to the end. Returns each
/// message's effect count.
fn replay(design: Design, messages: usize, crash_after: Option<usize>) -> Vec<u32> {
    let mut durable = Durable::default();
    let mut executed = 0usize;
    let mut crashed = false;
    // Two lives at most: the one that crashes and the one after the restart.
    for life in 0..2 {
        if life == 1 {
            if !crashed {
                break;
            }
            durable.open_txn = None; // the broker aborts the dead worker's transaction
        }
        let mut position = durable.committed_offset; // in memory
        'life: while position < messages {
            for &step in design.steps() {
                if life == 0 && crash_after == Some(executed) {
                    crashed = true;
                    break 'life;
                }
                durable.apply(step, position);
                executed += 1;
            }
            position += 1;
        }
        if life == 0 && crash_after == Some(executed) {
            crashed = true; // a crash after the very last step
        }
    }
    let counted = if design.counts_outside_calls() {
        &durable.outside_calls
    } else {
        &durable.outputs
    };
    let mut effects = vec![0u32; messages];
    for &m in counted {
        effects[m] += 1;
    }
    effects
}

fn classify(effects: &[u32]) -> Harm {
    if effects.contains(&0) {
        Harm::Loss
    } else if effects.iter().any(|&e| e > 1) {
        Harm::Duplicate
    } else {
        Harm::Nothing
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrashPoint {
    /// The crash happens after this many steps of the run (1-based).
    pub after_step: usize,
    /// The message being handled (1-based) and the step just completed.
    pub message: usize,
    pub step: Step,
    pub step_label: &'static str,
    pub harm: Harm,
    /// Effects per message after the restart.
    pub effects: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DesignOutcome {
    pub design: Design,
    pub label: &'static str,
    pub steps: Vec<&'static str>,
    pub points: Vec<CrashPoint>,
    pub nothing: u64,
    pub duplicate: u64,
    pub loss: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub design: Design,
    pub messages: u64,
    /// The chosen design (also in `designs`).
    pub chosen: DesignOutcome,
    pub designs: Vec<DesignOutcome>,
    pub reading: String,
}

fn enumerate(design: Design, messages: usize) -> DesignOutcome {
    debug_assert!(replay(design, messages, None).iter().all(|&e| e == 1));
    let steps = design.steps();
    let total = steps.len() * messages;
    let points: Vec<CrashPoint> = (1..=total)
        .map(|k| {
            let effects = replay(design, messages, Some(k));
            let step = steps[(k - 1) % steps.len()];
            CrashPoint {
                after_step: k,
                message: (k - 1) / steps.len() + 1,
                step,
                step_label: step.label(),
                harm: classify(&effects),
                effects,
            }
        })
        .collect();
    let count = |h: Harm| points.iter().filter(|p| p.harm == h).count() as u64;
    DesignOutcome {
        design,
        label: design.label(),
        steps: steps.iter().map(|s| s.label()).collect(),
        nothing: count(Harm::Nothing),
        duplicate: count(Harm::Duplicate),
        loss: count(Harm::Loss),
        points,
    }
}

pub fn run(params: &Params, _seed: u64) -> Result<Outcome, SimError> {
    params.validate()?;
    let messages = params.messages as usize;
    let designs: Vec<DesignOutcome> = Design::ALL
        .into_iter()
        .map(|d| enumerate(d, messages))
        .collect();
    let chosen = designs
        .iter()
        .find(|d| d.design == params.design)
        .cloned()
        .ok_or_else(|| SimError::BadParams("unknown design".to_string()))?;
    let harmful: Vec<String> = chosen
        .points
        .iter()
        .filter(|p| p.harm != Harm::Nothing && p.message == 1)
        .map(|p| format!("after “{}”", p.step_label))
        .collect();
    let reading = if harmful.is_empty() {
        format!(
            "{}: none of its {} crash points loses or repeats a message.",
            capitalize(chosen.label),
            chosen.points.len()
        )
    } else {
        format!(
            "{}: of {} crash points, {} and {}; for each message the harm comes from a crash {}.",
            capitalize(chosen.label),
            chosen.points.len(),
            how_many(chosen.duplicate, "repeats work", "repeat work"),
            how_many(chosen.loss, "loses work", "lose work"),
            harmful.join(" or ")
        )
    };
    Ok(Outcome {
        design: params.design,
        messages: params.messages,
        chosen,
        designs,
        reading,
    })
}

/// "none repeats work", "1 repeats work", "3 repeat work".
fn how_many(n: u64, one: &str, many: &str) -> String {
    match n {
        0 => format!("none {one}"),
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl Outcome {
    pub fn table(&self) -> String {
        let summary: Vec<Vec<String>> = self
            .designs
            .iter()
            .map(|d| {
                vec![
                    d.label.to_string(),
                    d.points.len().to_string(),
                    d.nothing.to_string(),
                    d.duplicate.to_string(),
                    d.loss.to_string(),
                ]
            })
            .collect();
        let points: Vec<Vec<String>> = self
            .chosen
            .points
            .iter()
            .map(|p| {
                vec![
                    p.after_step.to_string(),
                    p.message.to_string(),
                    p.step_label.to_string(),
                    format!("{:?}", p.harm).to_lowercase(),
                    format!("{:?}", p.effects),
                ]
            })
            .collect();
        format!(
            "{}\ncrash points of: {}\n{}",
            text::table(
                &["design", "points", "nothing", "duplicate", "loss"],
                &summary
            ),
            self.chosen.label,
            text::table(
                &["after step", "message", "step", "harm", "effects"],
                &points
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn outcome(design: Design, messages: u64) -> DesignOutcome {
        run(&Params { design, messages }, 0).unwrap().chosen
    }

    #[test]
    fn counted_by_hand_for_one_message() {
        let w = outcome(Design::WriteThenCommit, 1);
        assert_eq!((w.duplicate, w.loss), (1, 0));
        let harmful: Vec<_> = w
            .points
            .iter()
            .filter(|p| p.harm != Harm::Nothing)
            .collect();
        assert_eq!(harmful[0].step, Step::WriteOutput);
        assert_eq!(harmful[0].effects, vec![2]);

        let c = outcome(Design::CommitThenWrite, 1);
        assert_eq!((c.duplicate, c.loss), (0, 1));
        let harmful: Vec<_> = c
            .points
            .iter()
            .filter(|p| p.harm != Harm::Nothing)
            .collect();
        assert_eq!(harmful[0].step, Step::CommitOffset);
        assert_eq!(harmful[0].effects, vec![0]);

        let t = outcome(Design::Transactional, 1);
        assert_eq!((t.duplicate, t.loss, t.nothing), (0, 0, 5));

        let e = outcome(Design::ExternalEffect, 1);
        assert_eq!((e.duplicate, e.loss), (3, 0));
        let steps: Vec<Step> = e
            .points
            .iter()
            .filter(|p| p.harm == Harm::Duplicate)
            .map(|p| p.step)
            .collect();
        assert_eq!(
            steps,
            vec![
                Step::CallOutside,
                Step::WriteOutputInTxn,
                Step::AddOffsetToTxn
            ]
        );
    }

    #[test]
    fn harm_scales_with_messages_and_every_point_is_enumerated() {
        for m in 1..=MESSAGES.max {
            let per_message = [(1, 0), (0, 1), (0, 0), (3, 0)];
            for (d, (dup, loss)) in Design::ALL.into_iter().zip(per_message) {
                let o = outcome(d, m);
                assert_eq!(o.points.len() as u64, m * d.steps().len() as u64);
                assert_eq!((o.duplicate, o.loss), (dup * m, loss * m), "{d:?} × {m}");
                assert_eq!(o.nothing + o.duplicate + o.loss, o.points.len() as u64);
            }
        }
    }

    #[test]
    fn a_transaction_hides_output_until_commit() {
        let mut d = Durable::default();
        d.apply(Step::BeginTxn, 0);
        d.apply(Step::WriteOutputInTxn, 0);
        d.apply(Step::AddOffsetToTxn, 0);
        assert!(d.outputs.is_empty());
        assert_eq!(d.committed_offset, 0);
        d.apply(Step::CommitTxn, 0);
        assert_eq!(d.outputs, vec![0]);
        assert_eq!(d.committed_offset, 1);
    }

    #[test]
    fn bad_input_refused_and_seed_irrelevant() {
        assert!(run(
            &Params {
                messages: 0,
                ..Params::default()
            },
            0
        )
        .is_err());
        assert!(run(
            &Params {
                messages: 5,
                ..Params::default()
            },
            0
        )
        .is_err());
        assert_eq!(
            run(&Params::default(), 1).unwrap(),
            run(&Params::default(), 2).unwrap()
        );
    }

    proptest! {
        #[test]
        fn no_crash_means_one_effect_each(m in 1usize..=4, d in 0usize..4) {
            let design = Design::ALL[d];
            prop_assert!(replay(design, m, None).iter().all(|&e| e == 1));
            // A crash after the last step changes nothing either.
            let last = m * design.steps().len();
            prop_assert!(replay(design, m, Some(last)).iter().all(|&e| e == 1));
        }
    }
}
