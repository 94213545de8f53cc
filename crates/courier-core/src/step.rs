//! The delivery loop's decisions, returned as data.
//!
//! The runtime asks what to do next and performs it; nothing here touches the
//! network. The rule that makes resends safe: once an attempt was counted, any
//! owner looks the key up before it sends again, and resends only on a
//! definite "not found", with the same key.
//!
//! # Invariants
//! - `Step::Send` follows a claim only when no attempt was ever counted.
//! - After an unknown send outcome the next network call is a lookup.
//! - A rejection is never answered with a resend.

use crate::Status;

/// What the worker does next for one claimed action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Count an attempt (fenced), then send with the action's key.
    Send,
    /// Look the key up.
    Lookup,
    /// Wait (backoff), then look the key up.
    RetryLookup,
    /// The provider has the message: record this status and settle.
    Settle(Status),
    /// The provider refused the action: mark it failed with this reason, alert.
    Fail(String),
}

/// What a lookup answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupAnswer {
    Found(Status),
    NotFound,
    Unknown,
}

/// What a send answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendAnswer {
    /// 201, or a replay of it: the provider has the message.
    Accepted(Status),
    /// A definite refusal (400, 422, ...): no message, and resending would not help.
    Rejected(String),
    /// Time-out, 409, 429, 5xx, reset or refused: the message may or may not exist.
    Unknown,
}

/// The first step after a claim, from what the outbox row says.
pub fn after_claim(attempts: u32, status: Status) -> Step {
    if status.rank() >= Status::Accepted.rank() {
        Step::Settle(status)
    } else if attempts == 0 {
        Step::Send
    } else {
        Step::Lookup
    }
}

pub fn after_lookup(answer: &LookupAnswer) -> Step {
    match answer {
        LookupAnswer::Found(s) => Step::Settle(*s),
        LookupAnswer::NotFound => Step::Send,
        LookupAnswer::Unknown => Step::RetryLookup,
    }
}

pub fn after_send(answer: &SendAnswer) -> Step {
    match answer {
        SendAnswer::Accepted(s) => Step::Settle(*s),
        SendAnswer::Rejected(reason) => Step::Fail(reason.clone()),
        SendAnswer::Unknown => Step::RetryLookup,
    }
}

/// Whether a request may leave now, given the lease deadline as this process
/// measured it (monotonic milliseconds) and a safety margin: the check the
/// worker makes immediately before every send, because a fence in the database
/// cannot stop a request that never touches the database.
pub fn may_send(now_ms: u64, lease_deadline_ms: u64, margin_ms: u64) -> bool {
    now_ms.saturating_add(margin_ms) < lease_deadline_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_claim_sends_and_a_reclaim_looks_up_first() {
        assert_eq!(after_claim(0, Status::Sending), Step::Send);
        assert_eq!(after_claim(1, Status::Sending), Step::Lookup);
        assert_eq!(after_claim(3, Status::Sending), Step::Lookup);
        assert_eq!(
            after_claim(1, Status::Accepted),
            Step::Settle(Status::Accepted)
        );
        assert_eq!(
            after_claim(2, Status::Delivered),
            Step::Settle(Status::Delivered)
        );
    }

    #[test]
    fn only_a_definite_not_found_permits_a_send() {
        assert_eq!(after_lookup(&LookupAnswer::NotFound), Step::Send);
        assert_eq!(after_lookup(&LookupAnswer::Unknown), Step::RetryLookup);
        assert_eq!(
            after_lookup(&LookupAnswer::Found(Status::Sent)),
            Step::Settle(Status::Sent)
        );
    }

    #[test]
    fn unknown_sends_are_looked_up_and_rejections_are_not_resent() {
        assert_eq!(after_send(&SendAnswer::Unknown), Step::RetryLookup);
        assert_eq!(
            after_send(&SendAnswer::Rejected("idempotency_key_reused".into())),
            Step::Fail("idempotency_key_reused".into())
        );
        assert_eq!(
            after_send(&SendAnswer::Accepted(Status::Accepted)),
            Step::Settle(Status::Accepted)
        );
    }

    #[test]
    fn sends_stop_before_the_margin() {
        assert!(may_send(1_000, 2_000, 500));
        assert!(!may_send(1_500, 2_000, 500));
        assert!(!may_send(2_500, 2_000, 0));
        assert!(!may_send(u64::MAX, 2_000, 10));
    }
}
