//! The protocol decisions of courier-core pinned by whole tables, through the
//! public API only.
//!
//! `cargo mutants` found no surviving mutant in `status` (merge, merged,
//! merge_lookup, rank, is_final) or `step` (after_claim, after_lookup,
//! after_send, may_send): the unit tests next to the code catch every one.
//! These tables keep them caught if those spot checks change, and they also
//! catch edits that cargo-mutants does not generate (swapped match arms, an
//! off-by-one at the send margin): every input pair is checked against a
//! table written out by hand, not computed by the code under test.

use courier_core::merge;
use courier_core::status::{merge_lookup, merged, Merge, Status};
use courier_core::step::{
    after_claim, after_lookup, after_send, may_send, LookupAnswer, SendAnswer, Step,
};

use Status::{Accepted as A, Delivered as D, Failed as F, Sending as S, Sent as T};

/// Each row: current status, report, and what `merge` must answer.
const MERGE_TABLE: [(Status, Status, Merge); 25] = [
    (S, S, Merge::Same),
    (S, A, Merge::Advance(A)),
    (S, T, Merge::Advance(T)),
    (S, D, Merge::Advance(D)),
    (S, F, Merge::Advance(F)),
    (A, S, Merge::Backward),
    (A, A, Merge::Same),
    (A, T, Merge::Advance(T)),
    (A, D, Merge::Advance(D)),
    (A, F, Merge::Advance(F)),
    (T, S, Merge::Backward),
    (T, A, Merge::Backward),
    (T, T, Merge::Same),
    (T, D, Merge::Advance(D)),
    (T, F, Merge::Advance(F)),
    (D, S, Merge::Backward),
    (D, A, Merge::Backward),
    (D, T, Merge::Backward),
    (D, D, Merge::Same),
    (D, F, Merge::Conflict),
    (F, S, Merge::Backward),
    (F, A, Merge::Backward),
    (F, T, Merge::Backward),
    (F, D, Merge::Conflict),
    (F, F, Merge::Same),
];

/// The status after a merge, as the table says.
fn table_merged(current: Status, report: Status) -> Status {
    let (_, _, how) = MERGE_TABLE
        .into_iter()
        .find(|(c, r, _)| (*c, *r) == (current, report))
        .expect("the table has every pair");
    match how {
        Merge::Advance(s) => s,
        Merge::Same | Merge::Backward | Merge::Conflict => current,
    }
}

#[test]
fn merge_answers_the_table_for_every_pair() {
    for (current, report, want) in MERGE_TABLE {
        assert_eq!(merge(current, report), want, "merge({current}, {report})");
        assert_eq!(
            merged(current, report),
            table_merged(current, report),
            "merged({current}, {report})"
        );
    }
}

#[test]
fn ranks_and_finals_follow_the_forward_order() {
    let ranks = [(S, 0), (A, 1), (T, 2), (D, 3), (F, 3)];
    for (s, rank) in ranks {
        assert_eq!(s.rank(), rank, "{s}");
        assert_eq!(s.is_final(), rank == 3, "{s}");
    }
}

#[test]
fn a_lookup_replaces_the_status_only_to_settle_a_conflict_with_a_final() {
    for (current, looked_up, _) in MERGE_TABLE {
        // Without a recorded conflict a lookup is an ordinary forward merge.
        assert_eq!(
            merge_lookup(current, false, looked_up),
            table_merged(current, looked_up),
            "merge_lookup({current}, false, {looked_up})"
        );
        // With one, a final answer wins even against the other final; a
        // non-final answer cannot settle it and merges forward as usual.
        let want = if matches!(looked_up, D | F) {
            looked_up
        } else {
            table_merged(current, looked_up)
        };
        assert_eq!(
            merge_lookup(current, true, looked_up),
            want,
            "merge_lookup({current}, true, {looked_up})"
        );
    }
}

#[test]
fn a_claim_sends_only_when_no_attempt_was_ever_counted() {
    for attempts in [0, 1, 2, u32::MAX] {
        let first = if attempts == 0 {
            Step::Send
        } else {
            Step::Lookup
        };
        assert_eq!(after_claim(attempts, S), first, "attempts {attempts}");
        for s in [A, T, D, F] {
            assert_eq!(
                after_claim(attempts, s),
                Step::Settle(s),
                "attempts {attempts}, {s}"
            );
        }
    }
}

#[test]
fn every_answer_maps_to_its_step() {
    let lease = courier_core::lease::LocalLease {
        now_ms: 0,
        deadline_ms: 5_000,
        expires_ms: None,
    };
    let after_lookup = |a: &LookupAnswer| after_lookup(a, lease, 500, 2_000);
    for s in Status::ALL {
        assert_eq!(after_lookup(&LookupAnswer::Found(s)), Step::Settle(s));
        assert_eq!(after_send(&SendAnswer::Accepted(s)), Step::Settle(s));
    }
    assert_eq!(after_lookup(&LookupAnswer::NotFound), Step::Send);
    assert_eq!(after_lookup(&LookupAnswer::Unknown), Step::RetryLookup);
    assert_eq!(after_send(&SendAnswer::Unknown), Step::RetryLookup);
    assert_eq!(
        after_send(&SendAnswer::Rejected {
            status: 400,
            reason: "invalid_recipient".into()
        }),
        Step::Fail {
            status: 400,
            reason: "invalid_recipient".into()
        }
    );
}

#[test]
fn a_send_stops_exactly_at_the_margin() {
    let deadline_ms = 10_000;
    let margin_ms = 500;
    // The last millisecond that may still send, then the first that may not.
    assert!(may_send(9_499, deadline_ms, margin_ms));
    assert!(!may_send(9_500, deadline_ms, margin_ms));
    assert!(!may_send(9_501, deadline_ms, margin_ms));
    // Without a margin the deadline itself is already too late.
    assert!(may_send(9_999, deadline_ms, 0));
    assert!(!may_send(10_000, deadline_ms, 0));
    // A margin as long as the lease forbids every send; overflow saturates.
    assert!(!may_send(0, deadline_ms, deadline_ms));
    assert!(!may_send(1, u64::MAX, u64::MAX));
    assert!(may_send(0, u64::MAX, u64::MAX - 1));
}
