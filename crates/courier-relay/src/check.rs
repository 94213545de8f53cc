//! The shared checker: one function that every protocol's run is judged by.
//!
//! It reads only what the run left behind (etcd's records, the stream's
//! copies, the consumer's state) and the tasks that were created, so a broken
//! protocol cannot hide from it by reporting on itself.
//!
//! # Invariants checked
//! - `create-idempotent`: a repeated request returns the first task and writes nothing.
//! - `no-lost-task`: a task whose event reached the stream is completed.
//! - `no-lost-publication`: a task whose intent is no longer pending has an event in the stream.
//! - `no-stuck-intent`: no publication intent is still pending at the end.
//! - `single-effect`: the counter equals the sum of the amounts of the completed
//!   tasks, each counted once, and every expected task's amount is in it.
//! - `dedup-per-result`: every result has the dedup record of its event.
//! - `result-matches-task`: every result belongs to a created task and carries its amount.

use crate::model::{DedupRecord, ResultRecord, TaskRecord, TaskState};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    CreateIdempotent,
    NoLostTask,
    NoLostPublication,
    NoStuckIntent,
    SingleEffect,
    DedupPerResult,
    ResultMatchesTask,
}

impl Invariant {
    pub const ALL: [Invariant; 7] = [
        Invariant::CreateIdempotent,
        Invariant::NoLostTask,
        Invariant::NoLostPublication,
        Invariant::NoStuckIntent,
        Invariant::SingleEffect,
        Invariant::DedupPerResult,
        Invariant::ResultMatchesTask,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Invariant::CreateIdempotent => "create-idempotent",
            Invariant::NoLostTask => "no-lost-task",
            Invariant::NoLostPublication => "no-lost-publication",
            Invariant::NoStuckIntent => "no-stuck-intent",
            Invariant::SingleEffect => "single-effect",
            Invariant::DedupPerResult => "dedup-per-result",
            Invariant::ResultMatchesTask => "result-matches-task",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: Invariant,
    pub detail: String,
}

/// A task the run created, as the creator saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedTask {
    pub task_id: String,
    pub event_id: String,
    pub amount: u64,
}

/// A repeated create request and what it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepeatedCreate {
    pub idempotency_key: String,
    pub first_task_id: String,
    pub repeat_task_id: String,
    /// Whether the repeat wrote anything (the store's revision moved).
    pub repeat_wrote: bool,
}

/// What the run left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub tasks: BTreeMap<String, TaskRecord>,
    /// Task ids of outbox entries still pending.
    pub pending_outbox: BTreeSet<String>,
    /// Dedup records by event id.
    pub dedup: BTreeMap<String, DedupRecord>,
    /// Results by task id.
    pub results: BTreeMap<String, ResultRecord>,
    pub counter: u64,
    /// Copies of each event in the stream, by event id.
    pub stream_copies: BTreeMap<String, u64>,
    /// Messages delivered and not acknowledged at the end.
    pub ack_pending: u64,
    pub repeated_creates: Vec<RepeatedCreate>,
}

/// Checks a run. An empty answer means every invariant held.
pub fn check(expected: &[ExpectedTask], obs: &Observation) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut push = |invariant, detail: String| out.push(Violation { invariant, detail });

    for r in &obs.repeated_creates {
        if r.repeat_task_id != r.first_task_id || r.repeat_wrote {
            push(
                Invariant::CreateIdempotent,
                format!(
                    "request {:?} created {} first; its repeat answered {} and {}",
                    r.idempotency_key,
                    r.first_task_id,
                    r.repeat_task_id,
                    if r.repeat_wrote {
                        "wrote to etcd"
                    } else {
                        "wrote nothing"
                    }
                ),
            );
        }
    }

    let mut completed_sum: u64 = 0;
    let mut completed = 0usize;
    for t in expected {
        let done = obs
            .tasks
            .get(&t.task_id)
            .is_some_and(|r| r.state == TaskState::Completed)
            && obs.results.contains_key(&t.task_id);
        let copies = obs.stream_copies.get(&t.event_id).copied().unwrap_or(0);
        let pending = obs.pending_outbox.contains(&t.task_id);
        if done {
            completed += 1;
            completed_sum = completed_sum.saturating_add(t.amount);
        } else if pending {
            push(
                Invariant::NoStuckIntent,
                format!(
                    "task {} (amount {}) is not completed: its publication intent is still pending ({copies} in the stream)",
                    t.task_id, t.amount
                ),
            );
        } else if copies == 0 {
            push(
                Invariant::NoLostPublication,
                format!(
                    "task {} (amount {}) is lost: its outbox entry was marked published, but the stream never got {}",
                    t.task_id, t.amount, t.event_id
                ),
            );
        } else {
            push(
                Invariant::NoLostTask,
                format!(
                    "task {} (amount {}) is lost: {} is in the stream ({copies}x) but no result was committed{}",
                    t.task_id,
                    t.amount,
                    t.event_id,
                    if obs.ack_pending == 0 {
                        " and the consumer has nothing left to redeliver"
                    } else {
                        " (messages still await their ACK)"
                    }
                ),
            );
        }
        if pending && done {
            push(
                Invariant::NoStuckIntent,
                format!(
                    "task {} is completed but its intent is still pending",
                    t.task_id
                ),
            );
        }
    }

    let by_id: BTreeMap<&str, &ExpectedTask> =
        expected.iter().map(|t| (t.task_id.as_str(), t)).collect();
    let mut result_sum: u64 = 0;
    for (task_id, r) in &obs.results {
        result_sum = result_sum.saturating_add(r.amount);
        match by_id.get(task_id.as_str()) {
            None => push(
                Invariant::ResultMatchesTask,
                format!("result for {task_id}, which no request created"),
            ),
            Some(t) if t.amount != r.amount || t.event_id != r.event_id => push(
                Invariant::ResultMatchesTask,
                format!(
                    "result for {task_id} says {} x{}, the task says {} x{}",
                    r.event_id, r.amount, t.event_id, t.amount
                ),
            ),
            Some(t) => {
                if !obs.dedup.contains_key(&t.event_id) {
                    push(
                        Invariant::DedupPerResult,
                        format!(
                            "result for {task_id} has no dedup record for {}: a redelivery would apply it again",
                            t.event_id
                        ),
                    );
                }
            }
        }
    }

    if obs.counter != completed_sum || obs.counter != result_sum {
        let extra = obs.counter.saturating_sub(completed_sum);
        push(
            Invariant::SingleEffect,
            if extra > 0 {
                format!(
                    "counter is {} but the {completed} completed tasks sum to {completed_sum}: {extra} was applied more than once",
                    obs.counter
                )
            } else {
                format!(
                    "counter is {} but the {completed} completed tasks sum to {completed_sum} (results sum to {result_sum})",
                    obs.counter
                )
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event_id_for;

    fn expected() -> Vec<ExpectedTask> {
        [("t1", 2), ("t2", 3), ("t3", 5)]
            .into_iter()
            .map(|(id, amount)| ExpectedTask {
                task_id: id.into(),
                event_id: event_id_for(id),
                amount,
            })
            .collect()
    }

    /// The state a correct run leaves: every task completed once.
    fn clean() -> Observation {
        let mut obs = Observation::default();
        let mut counter = 0;
        for t in expected() {
            counter += t.amount;
            obs.tasks.insert(
                t.task_id.clone(),
                TaskRecord {
                    task_id: t.task_id.clone(),
                    event_id: t.event_id.clone(),
                    amount: t.amount,
                    state: TaskState::Completed,
                },
            );
            obs.dedup.insert(
                t.event_id.clone(),
                DedupRecord {
                    task_id: t.task_id.clone(),
                    worker: "w1".into(),
                },
            );
            obs.results.insert(
                t.task_id.clone(),
                ResultRecord {
                    event_id: t.event_id.clone(),
                    amount: t.amount,
                    counter_after: counter,
                },
            );
            obs.stream_copies.insert(t.event_id.clone(), 1);
        }
        obs.counter = counter;
        obs
    }

    fn invariants(v: &[Violation]) -> Vec<Invariant> {
        v.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn a_clean_run_passes_even_with_duplicate_copies() {
        let mut obs = clean();
        obs.stream_copies.insert("evt-t1".into(), 2);
        assert_eq!(check(&expected(), &obs), vec![]);
    }

    #[test]
    fn a_doubled_effect_breaks_single_effect() {
        let mut obs = clean();
        obs.counter += 2;
        let v = check(&expected(), &obs);
        assert_eq!(invariants(&v), vec![Invariant::SingleEffect]);
        assert!(
            v[0].detail.contains("applied more than once"),
            "{}",
            v[0].detail
        );
    }

    #[test]
    fn a_result_without_dedup_is_reported() {
        let mut obs = clean();
        obs.dedup.clear();
        assert_eq!(
            invariants(&check(&expected(), &obs)),
            vec![Invariant::DedupPerResult; 3]
        );
    }

    #[test]
    fn lost_tasks_are_told_apart_by_where_they_stopped() {
        // Delivered and acknowledged, never committed.
        let mut obs = clean();
        obs.tasks.get_mut("t1").unwrap().state = TaskState::Pending;
        obs.results.remove("t1");
        obs.dedup.remove("evt-t1");
        obs.counter -= 2;
        assert_eq!(
            invariants(&check(&expected(), &obs)),
            vec![Invariant::NoLostTask]
        );
        // Marked published, never in the stream.
        obs.stream_copies.remove("evt-t1");
        assert_eq!(
            invariants(&check(&expected(), &obs)),
            vec![Invariant::NoLostPublication]
        );
        // Still pending.
        obs.pending_outbox.insert("t1".into());
        assert_eq!(
            invariants(&check(&expected(), &obs)),
            vec![Invariant::NoStuckIntent]
        );
    }

    #[test]
    fn a_repeat_that_writes_or_answers_another_task_is_reported() {
        let mut obs = clean();
        let ok = RepeatedCreate {
            idempotency_key: "req-1".into(),
            first_task_id: "t1".into(),
            repeat_task_id: "t1".into(),
            repeat_wrote: false,
        };
        obs.repeated_creates.push(ok.clone());
        assert_eq!(check(&expected(), &obs), vec![]);
        obs.repeated_creates.push(RepeatedCreate {
            repeat_wrote: true,
            ..ok.clone()
        });
        obs.repeated_creates.push(RepeatedCreate {
            repeat_task_id: "t9".into(),
            ..ok
        });
        assert_eq!(
            invariants(&check(&expected(), &obs)),
            vec![Invariant::CreateIdempotent; 2]
        );
    }

    #[test]
    fn a_foreign_or_altered_result_is_reported() {
        let mut obs = clean();
        obs.results.get_mut("t2").unwrap().amount = 4;
        obs.counter += 1;
        let v = invariants(&check(&expected(), &obs));
        assert!(v.contains(&Invariant::ResultMatchesTask), "{v:?}");
        let mut obs = clean();
        obs.results.insert(
            "t9".into(),
            ResultRecord {
                event_id: "evt-t9".into(),
                amount: 1,
                counter_after: 11,
            },
        );
        obs.counter += 1;
        let v = invariants(&check(&expected(), &obs));
        assert!(v.contains(&Invariant::ResultMatchesTask), "{v:?}");
        assert!(v.contains(&Invariant::SingleEffect), "{v:?}");
    }
}
