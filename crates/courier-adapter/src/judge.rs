//! The exactly-once check of a run, from the database and the stub's
//! record: every job completed, each with exactly one message.
//!
//! # Invariants
//! - A run passes only if every action is settled (dispatched or done), no
//!   action failed, every settled action's key is in the record exactly
//!   once, and the record holds no key of no action.

use courier_store::run_views::ActionOutcome;
use serde::Serialize;
use std::collections::HashMap;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub actions: usize,
    pub settled: usize,
    /// Still pending or claimed: not completed.
    pub open: Vec<i64>,
    pub failed: Vec<i64>,
    /// Settled, but the provider has no message for the key.
    pub without_message: Vec<i64>,
    /// Keys the provider created more than once (a second effect).
    pub repeated_keys: Vec<String>,
    /// Keys of messages that belong to no action.
    pub unknown_keys: Vec<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.open.is_empty()
            && self.failed.is_empty()
            && self.without_message.is_empty()
            && self.repeated_keys.is_empty()
            && self.unknown_keys.is_empty()
    }
}

/// Judges `actions` (from the database) against `record` (every key the
/// stub created, in order, repeats included).
pub fn judge(actions: &[ActionOutcome], record: &[String]) -> Verdict {
    let mut created: HashMap<&str, u32> = HashMap::new();
    for k in record {
        *created.entry(k.as_str()).or_default() += 1;
    }
    let mut v = Verdict {
        actions: actions.len(),
        ..Verdict::default()
    };
    let mut known = std::collections::HashSet::new();
    for a in actions {
        if let Some(k) = &a.key {
            known.insert(k.as_str());
        }
        match a.state.as_str() {
            "dispatched" | "done" => {
                v.settled += 1;
                let n = a
                    .key
                    .as_deref()
                    .and_then(|k| created.get(k))
                    .copied()
                    .unwrap_or(0);
                if n == 0 {
                    v.without_message.push(a.id);
                }
            }
            "failed" => v.failed.push(a.id),
            _ => v.open.push(a.id),
        }
    }
    for (k, n) in &created {
        if *n > 1 {
            v.repeated_keys.push(k.to_string());
        }
        if !known.contains(k) {
            v.unknown_keys.push(k.to_string());
        }
    }
    v.repeated_keys.sort();
    v.unknown_keys.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(id: i64, state: &str, key: Option<&str>) -> ActionOutcome {
        ActionOutcome {
            id,
            state: state.into(),
            key: key.map(str::to_string),
            attempts: 1,
        }
    }

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_job_once_passes() {
        let a = [
            action(1, "dispatched", Some("k1")),
            action(2, "done", Some("k2")),
        ];
        let v = judge(&a, &keys(&["k2", "k1"]));
        assert!(v.passed(), "{v:?}");
        assert_eq!((v.actions, v.settled), (2, 2));
    }

    /// Each way a run can be wrong is caught (the checker's negative controls).
    #[test]
    fn each_violation_is_caught() {
        let ok = action(1, "dispatched", Some("k1"));
        type Case = (Vec<ActionOutcome>, Vec<String>, fn(&Verdict) -> bool);
        let cases: Vec<Case> = vec![
            (
                vec![ok.clone(), action(2, "pending", None)],
                keys(&["k1"]),
                |v| v.open == [2],
            ),
            (
                vec![ok.clone(), action(2, "claimed", Some("k2"))],
                keys(&["k1", "k2"]),
                |v| v.open == [2],
            ),
            (
                vec![ok.clone(), action(2, "failed", Some("k2"))],
                keys(&["k1"]),
                |v| v.failed == [2],
            ),
            (
                vec![ok.clone(), action(2, "dispatched", Some("k2"))],
                keys(&["k1"]),
                |v| v.without_message == [2],
            ),
            (vec![ok.clone()], keys(&["k1", "k1"]), |v| {
                v.repeated_keys == ["k1"]
            }),
            (vec![ok.clone()], keys(&["k1", "k9"]), |v| {
                v.unknown_keys == ["k9"]
            }),
        ];
        for (actions, record, caught) in cases {
            let v = judge(&actions, &record);
            assert!(!v.passed() && caught(&v), "{v:?}");
        }
    }
}
