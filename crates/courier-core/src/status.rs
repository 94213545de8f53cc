//! Message statuses and their forward-only merge.
//!
//! The order is `sending < accepted < sent < delivered | failed`. `delivered`
//! and `failed` are both final and share a rank, so neither replaces the other:
//! a second, different final status is a [`Merge::Conflict`], which the caller
//! answers with a lookup (the provider's final word), never by arrival order.
//!
//! # Invariants
//! - `merge(a, a)` never changes anything (idempotent).
//! - The result of a merge never ranks below the current status.
//! - For reports that do not conflict, the final state does not depend on the
//!   order in which they arrive.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The status of one message, as the courier knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The intent is written; the provider has not confirmed anything yet.
    Sending,
    /// The provider has the message (201 or a replay, or a lookup found it).
    Accepted,
    /// The provider reports it handed the message on.
    Sent,
    /// Final: the handset has it.
    Delivered,
    /// Final: the provider gave up on it.
    Failed,
}

impl Status {
    /// The rank in the forward-only order; the two finals share the top rank.
    pub fn rank(self) -> u8 {
        match self {
            Status::Sending => 0,
            Status::Accepted => 1,
            Status::Sent => 2,
            Status::Delivered | Status::Failed => 3,
        }
    }

    pub fn is_final(self) -> bool {
        self.rank() == 3
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Sending => "sending",
            Status::Accepted => "accepted",
            Status::Sent => "sent",
            Status::Delivered => "delivered",
            Status::Failed => "failed",
        }
    }

    pub const ALL: [Status; 5] = [
        Status::Sending,
        Status::Accepted,
        Status::Sent,
        Status::Delivered,
        Status::Failed,
    ];
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "sending" => Status::Sending,
            "accepted" => Status::Accepted,
            "sent" => Status::Sent,
            "delivered" => Status::Delivered,
            "failed" => Status::Failed,
            other => return Err(UnknownStatus(other.to_string())),
        })
    }
}

/// What a report does to the current status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The report moves the status forward to this value.
    Advance(Status),
    /// The report says what we already know (a repeat): nothing changes.
    Same,
    /// The report would move the status backwards: ignored, and counted.
    Backward,
    /// A second, different final status: nothing changes; ask the lookup.
    Conflict,
}

/// Merges a report into the current status, forward only.
pub fn merge(current: Status, report: Status) -> Merge {
    if current == report {
        return Merge::Same;
    }
    match current.rank().cmp(&report.rank()) {
        std::cmp::Ordering::Less => Merge::Advance(report),
        std::cmp::Ordering::Greater => Merge::Backward,
        // Equal rank and different values: only the two finals.
        std::cmp::Ordering::Equal => {
            debug_assert!(current.is_final() && report.is_final());
            Merge::Conflict
        }
    }
}

/// Applies [`merge`] and returns the resulting status.
pub fn merged(current: Status, report: Status) -> Status {
    match merge(current, report) {
        Merge::Advance(s) => s,
        Merge::Same | Merge::Backward | Merge::Conflict => current,
    }
}

/// What a lookup answer does to a status that may hold a recorded conflict.
///
/// The lookup is the provider's final word: when the courier recorded two
/// different finals, a final status from the lookup replaces the current one
/// even though it shares its rank. Without a conflict it is an ordinary merge.
pub fn merge_lookup(current: Status, conflict: bool, looked_up: Status) -> Status {
    if conflict && looked_up.is_final() {
        looked_up
    } else {
        merged(current, looked_up)
    }
}

/// The status and conflict flag of an outbox row after a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Folded {
    pub status: Status,
    /// Two different final statuses were reported and no lookup settled them.
    pub conflict: bool,
}

/// Folds one report into an outbox row's status and conflict flag: the
/// forward-only [`merge`], except that a lookup's final word settles a
/// recorded conflict ([`merge_lookup`]). Returns the new row and what the
/// report did (for the events and the webhook's answer).
pub fn fold_report(
    current: Status,
    conflict: bool,
    report: Status,
    from_lookup: bool,
) -> (Folded, Merge) {
    let (folded, how) = if from_lookup && conflict && report.is_final() {
        let status = merge_lookup(current, conflict, report);
        let folded = Folded {
            status,
            conflict: false,
        };
        (folded, Merge::Advance(status))
    } else {
        let how = merge(current, report);
        let status = match how {
            Merge::Advance(s) => s,
            _ => current,
        };
        let folded = Folded {
            status,
            conflict: conflict || how == Merge::Conflict,
        };
        (folded, how)
    };
    // The invariant the outbox rests on: a fold never moves a status back
    // (a lookup settling a conflict replaces one final with the other, of
    // the same rank).
    assert!(
        folded.status.rank() >= current.rank(),
        "a fold moved {current} back to {}",
        folded.status
    );
    (folded, how)
}

/// The kind of the event a merge leaves behind, if any (`events.kind`).
pub fn merge_event_kind(how: Merge) -> Option<&'static str> {
    match how {
        Merge::Backward => Some("backward"),
        Merge::Conflict => Some("conflict"),
        Merge::Advance(_) | Merge::Same => None,
    }
}

/// The outcome recorded with a webhook event id (`webhook_events.outcome`).
pub fn merge_label(how: Merge) -> &'static str {
    match how {
        Merge::Advance(_) => "advanced",
        Merge::Same => "same",
        Merge::Backward => "backward",
        Merge::Conflict => "conflict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn folding_follows_the_core_merge() {
        let (f, how) = fold_report(Status::Sent, false, Status::Accepted, false);
        assert_eq!(
            (f.status, f.conflict, how),
            (Status::Sent, false, Merge::Backward)
        );
        let (f, how) = fold_report(Status::Delivered, false, Status::Failed, false);
        assert_eq!(
            (f.status, f.conflict, how),
            (Status::Delivered, true, Merge::Conflict)
        );
        // A lookup settles a conflict.
        let (f, _) = fold_report(Status::Delivered, true, Status::Failed, true);
        assert_eq!((f.status, f.conflict), (Status::Failed, false));
        // A webhook does not.
        let (f, _) = fold_report(Status::Delivered, true, Status::Failed, false);
        assert_eq!((f.status, f.conflict), (Status::Delivered, true));
    }

    #[test]
    fn only_backward_and_conflicting_reports_leave_an_event() {
        assert_eq!(merge_event_kind(Merge::Backward), Some("backward"));
        assert_eq!(merge_event_kind(Merge::Conflict), Some("conflict"));
        assert_eq!(merge_event_kind(Merge::Same), None);
        assert_eq!(merge_event_kind(Merge::Advance(Status::Sent)), None);
        let labels: Vec<&str> = [
            Merge::Advance(Status::Sent),
            Merge::Same,
            Merge::Backward,
            Merge::Conflict,
        ]
        .into_iter()
        .map(merge_label)
        .collect();
        assert_eq!(labels, ["advanced", "same", "backward", "conflict"]);
    }

    fn any_status() -> impl Strategy<Value = Status> {
        prop::sample::select(Status::ALL.to_vec())
    }

    #[test]
    fn forward_steps_advance_and_backward_steps_are_ignored() {
        assert_eq!(
            merge(Status::Sending, Status::Accepted),
            Merge::Advance(Status::Accepted)
        );
        assert_eq!(
            merge(Status::Accepted, Status::Delivered),
            Merge::Advance(Status::Delivered)
        );
        assert_eq!(merge(Status::Delivered, Status::Sent), Merge::Backward);
        assert_eq!(merge(Status::Sent, Status::Accepted), Merge::Backward);
        assert_eq!(merge(Status::Sent, Status::Sent), Merge::Same);
        assert_eq!(
            merge(Status::Sent, Status::Failed),
            Merge::Advance(Status::Failed)
        );
    }

    #[test]
    fn two_different_finals_conflict() {
        assert_eq!(merge(Status::Delivered, Status::Failed), Merge::Conflict);
        assert_eq!(merge(Status::Failed, Status::Delivered), Merge::Conflict);
        assert_eq!(merged(Status::Failed, Status::Delivered), Status::Failed);
    }

    #[test]
    fn a_lookup_settles_a_conflict_and_only_a_conflict() {
        assert_eq!(
            merge_lookup(Status::Delivered, true, Status::Failed),
            Status::Failed
        );
        assert_eq!(
            merge_lookup(Status::Delivered, false, Status::Failed),
            Status::Delivered
        );
        assert_eq!(
            merge_lookup(Status::Delivered, true, Status::Sent),
            Status::Delivered
        );
    }

    #[test]
    fn status_round_trips_through_text() {
        for s in Status::ALL {
            assert_eq!(s.as_str().parse::<Status>(), Ok(s));
        }
        assert!("queued".parse::<Status>().is_err());
    }

    proptest! {
        #[test]
        fn merge_is_idempotent(a in any_status(), b in any_status()) {
            let once = merged(a, b);
            prop_assert_eq!(merged(once, b), once);
        }

        #[test]
        fn merge_never_goes_backwards(a in any_status(), b in any_status()) {
            prop_assert!(merged(a, b).rank() >= a.rank());
        }

        #[test]
        fn merge_order_does_not_matter_without_conflict(
            start in any_status(),
            reports in prop::collection::vec(any_status(), 0..8),
            seed in any::<u64>(),
        ) {
            // Non-conflicting: at most one kind of final status among the inputs.
            let has_delivered = reports.contains(&Status::Delivered) || start == Status::Delivered;
            let has_failed = reports.contains(&Status::Failed) || start == Status::Failed;
            prop_assume!(!(has_delivered && has_failed));
            let forward = reports.iter().fold(start, |s, r| merged(s, *r));
            let mut shuffled = reports.clone();
            // A seeded Fisher-Yates shuffle keeps the case reproducible.
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let backward = shuffled.iter().fold(start, |s, r| merged(s, *r));
            prop_assert_eq!(forward, backward);
            // The result is the highest-ranked status seen.
            let top = reports.iter().copied().chain([start]).max_by_key(|s| s.rank()).unwrap();
            prop_assert_eq!(forward.rank(), top.rank());
        }
    }
}
