//! The delivery loop's decisions, returned as data.
//!
//! The runtime performs one step, reports what happened, and asks what to do
//! next; nothing here touches the network, the database or a clock. The rule
//! that makes resends safe: once an attempt was counted, any owner looks the
//! key up before it sends again, and resends only on a definite "not found",
//! with the same key.
//!
//! One delivery walks these steps (each arrow is one function below):
//!
//! ```text
//! on_claim ──> ReadIntent ──after_intent──> after_claim ──> Send | Lookup | Settle
//!          └─> Request (the claim counted the first attempt) | Lookup | Expire
//! Send ──before_attempt──> CountAttempt | Extend(CountAttempt)
//! Extend(then) ──after_extend──> then | Abandon
//! CountAttempt ──after_count──> Request | Lookup | Extend(Send) | Abandon
//! Request ──after_send──> Settle | Fail | RetryLookup
//! Lookup ──tier::find_out──> (ask the provider) ──tier::after_lookup──>
//!        Settle | Send | RetryLookup | Expire;  or instead Send | Hold
//! RetryLookup ──after_backoff──> Lookup
//! any step ──unless_fenced──> Abandon, once the heartbeat found another owner
//! ```
//!
//! # Invariants
//! - `Step::Send` follows a claim only when no attempt was ever counted.
//! - `Step::Request` (a request leaves) follows only a counted attempt and a
//!   passing local lease check, made by the same function that chose it.
//! - After an unknown send outcome the next network call is a lookup.
//! - A rejection is never answered with a resend; a refusal of our own
//!   credentials never fails the action.
//! - No request leaves within the send margin of the action's deadline
//!   (`expires_at`). Past it, an action ends `Expire` only when no request
//!   can have left for its key (the claim's own first attempt, unsent), or
//!   when a lookup answers "not found" after the deadline plus the lookup
//!   lag; a message found is settled as usual.
//! - Where the provider's tier offers no lookup (`crate::tier`), the lookup
//!   is a resend with the same key (tier `a-`, inside the key's window) or
//!   a hold (`Step::Hold`): the action ends `unknown`, never resent.

pub use crate::lease::may_send;
use crate::lease::LocalLease;
use crate::Status;

/// What the worker does next for one claimed action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// (A reclaim.) Read the intent a previous owner wrote, fenced.
    ReadIntent,
    /// A send is due: check the lease locally, count an attempt, then send
    /// with the action's key.
    Send,
    /// The lease may end before a request lands: extend it (fenced), then
    /// resume with the step named.
    Extend(Resume),
    /// Count an attempt (fenced, refused when the lease ends within the margin).
    CountAttempt,
    /// The attempt is counted and the local lease check has just passed:
    /// send now.
    Request,
    /// Look the key up.
    Lookup,
    /// Wait (backoff), then look the key up.
    RetryLookup,
    /// The provider has the message: record this status and settle.
    Settle(Status),
    /// The provider refused the action: mark it failed with the provider's
    /// HTTP status and this reason, alert.
    Fail { status: u16, reason: String },
    /// The deadline passed with no message at the provider: end the action
    /// `expired` (fenced). Nothing is sent for it again.
    Expire,
    /// Nothing can tell whether an earlier attempt reached the provider
    /// (`crate::tier`): end the action `unknown` (fenced), alert, and send
    /// nothing for it again.
    Hold(HoldReason),
    /// Another owner holds the action: write nothing more, send nothing more.
    Abandon(FencedAt),
}

/// Why an action is held `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldReason {
    /// The provider has no lookup and the tier's policy is `hold`.
    NoLookup,
    /// Tier `a-`: the key's window has passed, so a resend would create.
    KeyWindow,
    /// No lookup, and the deadline has passed: a resend would go out late.
    Deadline,
}

impl HoldReason {
    /// The reason recorded on the action and in its `events` row.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::NoLookup => "no_lookup",
            HoldReason::KeyWindow => "key_window_passed",
            HoldReason::Deadline => "deadline_passed_without_lookup",
        }
    }
}

/// Where [`Step::Extend`] goes once the lease was extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The local check failed before counting: count now.
    CountAttempt,
    /// The database refused to count (lease too short): check again, then count.
    Send,
}

/// Which fenced operation found that another owner holds the action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FencedAt {
    /// The heartbeat found the lease at a newer epoch.
    Heartbeat,
    Intent,
    Extend,
    Attempt,
    Settle,
    Fail,
    Hold,
}

impl FencedAt {
    /// The name used in metrics labels and `events` rows.
    pub fn as_str(self) -> &'static str {
        match self {
            FencedAt::Heartbeat => "heartbeat",
            FencedAt::Intent => "intent",
            FencedAt::Extend => "extend",
            FencedAt::Attempt => "attempt",
            FencedAt::Settle => "settle",
            FencedAt::Fail => "fail",
            FencedAt::Hold => "hold",
        }
    }
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
    /// A definite refusal (400, 422, ...): no message, and resending would
    /// not help. `status` is the provider's HTTP status.
    Rejected { status: u16, reason: String },
    /// 401 or 403: the provider refused our credentials, not the action. No
    /// message was created by this request, but the action is not at fault.
    CredentialsRefused(String),
    /// The provider states this request created nothing and may be sent
    /// again later (Twilio's 429: "never processed and is always safe to
    /// retry"); not the contract's 429, which is an unknown outcome.
    NotCreated(String),
    /// Time-out, 409, 429, 5xx, reset or refused: the message may or may not exist.
    Unknown,
}

/// What the fenced read of the intent found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentRead {
    /// Ours: the attempts counted so far and the status reported so far.
    Held {
        attempts: u32,
        status: Status,
    },
    Fenced,
}

/// What a fenced lease extension found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extended {
    Held,
    /// Fenced, or the row stayed locked past the extension's patience.
    Lost,
}

/// What the fenced count of an attempt answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    Counted,
    /// The lease ends within the margin: nothing was counted.
    LeaseShort,
    Fenced,
}

/// The first step of a claimed action. A fresh action's claim wrote its
/// intent and counted its first attempt in the same statement, so it sends at
/// once if the lease allows; a reclaimed one reads the intent first.
pub fn on_claim(attempt_counted: bool, lease: LocalLease, margin_ms: u64) -> Step {
    if attempt_counted && lease.expired(margin_ms) {
        // The claim counted the key's first attempt (it wrote the intent:
        // none existed, so no request ever left) and it may not leave now.
        Step::Expire
    } else if attempt_counted {
        before_request(lease, margin_ms)
    } else {
        Step::ReadIntent
    }
}

pub fn after_intent(read: IntentRead) -> Step {
    match read {
        IntentRead::Held { attempts, status } => after_claim(attempts, status),
        IntentRead::Fenced => Step::Abandon(FencedAt::Intent),
    }
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

/// Before counting an attempt: a lease that may end before the request lands
/// is extended first.
pub fn before_attempt(lease: LocalLease, margin_ms: u64) -> Step {
    if lease.expired(margin_ms) {
        // No new attempt; an earlier one may have left: ask the provider.
        Step::Lookup
    } else if lease.may_send(margin_ms) {
        Step::CountAttempt
    } else {
        Step::Extend(Resume::CountAttempt)
    }
}

pub fn after_extend(then: Resume, extended: Extended) -> Step {
    match (extended, then) {
        (Extended::Held, Resume::CountAttempt) => Step::CountAttempt,
        (Extended::Held, Resume::Send) => Step::Send,
        (Extended::Lost, _) => Step::Abandon(FencedAt::Extend),
    }
}

/// After the fenced count, with the lease as measured right after it.
pub fn after_count(counted: Counted, lease: LocalLease, margin_ms: u64) -> Step {
    match counted {
        Counted::Counted => before_request(lease, margin_ms),
        // Nothing was counted: extend, then check and count again.
        Counted::LeaseShort => Step::Extend(Resume::Send),
        Counted::Fenced => Step::Abandon(FencedAt::Attempt),
    }
}

/// With an attempt counted: the request leaves only if the local lease check
/// passes right now. Otherwise the next step is a lookup: from a counted
/// attempt on, every path looks the key up before any further send.
pub fn before_request(lease: LocalLease, margin_ms: u64) -> Step {
    if lease.may_send(margin_ms) {
        Step::Request
    } else {
        Step::Lookup
    }
}

/// After a lookup. `lag_ms` is how long past the deadline a "not found"
/// is trusted to mean that no request ever reached the provider (the
/// lookup lag and a request's time-out: `Limits::lookup_lag_ms` +
/// `request_timeout_ms`).
pub fn after_lookup(answer: &LookupAnswer, lease: LocalLease, margin_ms: u64, lag_ms: u64) -> Step {
    match answer {
        LookupAnswer::Found(s) => Step::Settle(*s),
        LookupAnswer::NotFound if !lease.expired(margin_ms) => Step::Send,
        LookupAnswer::NotFound if lease.past_deadline_by(lag_ms) => Step::Expire,
        // Past the deadline, not yet past the lag: a request may still show.
        LookupAnswer::NotFound | LookupAnswer::Unknown => Step::RetryLookup,
    }
}

pub fn after_send(answer: &SendAnswer) -> Step {
    match answer {
        SendAnswer::Accepted(s) => Step::Settle(*s),
        SendAnswer::Rejected { status, reason } => Step::Fail {
            status: *status,
            reason: reason.clone(),
        },
        // Our credentials, not the action: alert and keep asking; never fail
        // the action for it. Nothing created, later: the same way, after a
        // backoff (a tier without a lookup then sends again, `tier`).
        SendAnswer::CredentialsRefused(_) | SendAnswer::NotCreated(_) | SendAnswer::Unknown => {
            Step::RetryLookup
        }
    }
}

/// Before every step: once the heartbeat has found the action at another
/// epoch, the delivery stops, whatever was next (a refusal already found
/// keeps its own name).
pub fn unless_fenced(next: Step, found_fenced: bool) -> Step {
    match next {
        Step::Abandon(_) => next,
        _ if found_fenced => Step::Abandon(FencedAt::Heartbeat),
        _ => next,
    }
}

/// After the backoff of a [`Step::RetryLookup`].
pub fn after_backoff() -> Step {
    Step::Lookup
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(now_ms: u64, deadline_ms: u64) -> LocalLease {
        LocalLease {
            now_ms,
            deadline_ms,
            expires_ms: None,
        }
    }

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
    fn a_claim_that_counted_the_attempt_skips_the_intent_but_not_the_lease_check() {
        assert_eq!(on_claim(true, lease(0, 5_000), 500), Step::Request);
        // Too late to send: the counted attempt may not leave, so the next
        // owner of this key (this one included) looks it up first.
        assert_eq!(on_claim(true, lease(4_600, 5_000), 500), Step::Lookup);
        assert_eq!(on_claim(false, lease(0, 5_000), 500), Step::ReadIntent);
        assert_eq!(on_claim(false, lease(4_600, 5_000), 500), Step::ReadIntent);
    }

    #[test]
    fn the_intent_read_decides_or_abandons() {
        let held = |attempts| IntentRead::Held {
            attempts,
            status: Status::Sending,
        };
        assert_eq!(after_intent(held(0)), Step::Send);
        assert_eq!(after_intent(held(2)), Step::Lookup);
        assert_eq!(
            after_intent(IntentRead::Held {
                attempts: 1,
                status: Status::Sent
            }),
            Step::Settle(Status::Sent)
        );
        assert_eq!(
            after_intent(IntentRead::Fenced),
            Step::Abandon(FencedAt::Intent)
        );
    }

    #[test]
    fn a_short_lease_is_extended_before_counting() {
        assert_eq!(before_attempt(lease(0, 5_000), 500), Step::CountAttempt);
        assert_eq!(
            before_attempt(lease(4_500, 5_000), 500),
            Step::Extend(Resume::CountAttempt)
        );
        assert_eq!(
            after_extend(Resume::CountAttempt, Extended::Held),
            Step::CountAttempt
        );
        assert_eq!(after_extend(Resume::Send, Extended::Held), Step::Send);
        for then in [Resume::CountAttempt, Resume::Send] {
            assert_eq!(
                after_extend(then, Extended::Lost),
                Step::Abandon(FencedAt::Extend)
            );
        }
    }

    #[test]
    fn a_counted_attempt_leaves_only_while_the_lease_holds() {
        let ok = lease(1_000, 5_000);
        let late = lease(4_501, 5_000);
        assert_eq!(after_count(Counted::Counted, ok, 500), Step::Request);
        assert_eq!(after_count(Counted::Counted, late, 500), Step::Lookup);
        // Refused as too short: nothing counted, so no lookup is owed yet.
        assert_eq!(
            after_count(Counted::LeaseShort, ok, 500),
            Step::Extend(Resume::Send)
        );
        assert_eq!(
            after_count(Counted::Fenced, ok, 500),
            Step::Abandon(FencedAt::Attempt)
        );
        assert_eq!(before_request(ok, 500), Step::Request);
        assert_eq!(before_request(late, 500), Step::Lookup);
    }

    #[test]
    fn only_a_definite_not_found_permits_a_send() {
        let l = lease(0, 5_000);
        assert_eq!(
            after_lookup(&LookupAnswer::NotFound, l, 500, 2_000),
            Step::Send
        );
        assert_eq!(
            after_lookup(&LookupAnswer::Unknown, l, 500, 2_000),
            Step::RetryLookup
        );
        assert_eq!(
            after_lookup(&LookupAnswer::Found(Status::Sent), l, 500, 2_000),
            Step::Settle(Status::Sent)
        );
        assert_eq!(after_backoff(), Step::Lookup);
    }

    fn expiring(now_ms: u64, expires_ms: u64) -> LocalLease {
        LocalLease {
            expires_ms: Some(expires_ms),
            ..lease(now_ms, now_ms + 5_000)
        }
    }

    #[test]
    fn past_the_deadline_nothing_leaves_and_only_a_late_not_found_expires() {
        // The claim's own first attempt, unsent: it ends at once.
        assert_eq!(on_claim(true, expiring(1_000, 1_400), 500), Step::Expire);
        assert_eq!(on_claim(true, expiring(1_000, 1_600), 500), Step::Request);
        // A reclaim reads the intent whatever the time.
        assert_eq!(on_claim(false, expiring(1_000, 900), 500), Step::ReadIntent);
        // No new attempt within the margin; ask about the earlier ones.
        assert_eq!(before_attempt(expiring(1_000, 1_400), 500), Step::Lookup);
        assert_eq!(before_request(expiring(1_000, 1_400), 500), Step::Lookup);
        assert_eq!(
            after_count(Counted::Counted, expiring(1_000, 1_400), 500),
            Step::Lookup
        );
        // A not-found before the deadline sends; after it, waits for the lag.
        let nf = &LookupAnswer::NotFound;
        assert_eq!(
            after_lookup(nf, expiring(1_000, 1_600), 500, 2_000),
            Step::Send
        );
        assert_eq!(
            after_lookup(nf, expiring(1_000, 1_400), 500, 2_000),
            Step::RetryLookup
        );
        assert_eq!(
            after_lookup(nf, expiring(3_399, 1_400), 500, 2_000),
            Step::RetryLookup
        );
        assert_eq!(
            after_lookup(nf, expiring(3_400, 1_400), 500, 2_000),
            Step::Expire
        );
        // Whatever the time, a message found is settled, never expired.
        assert_eq!(
            after_lookup(
                &LookupAnswer::Found(Status::Accepted),
                expiring(9_000, 1_400),
                500,
                0
            ),
            Step::Settle(Status::Accepted)
        );
    }

    #[test]
    fn unknown_sends_are_looked_up_and_rejections_are_not_resent() {
        assert_eq!(after_send(&SendAnswer::Unknown), Step::RetryLookup);
        assert_eq!(
            after_send(&SendAnswer::Rejected {
                status: 422,
                reason: "idempotency_key_reused".into()
            }),
            Step::Fail {
                status: 422,
                reason: "idempotency_key_reused".into()
            }
        );
        assert_eq!(
            after_send(&SendAnswer::Accepted(Status::Accepted)),
            Step::Settle(Status::Accepted)
        );
    }

    #[test]
    fn a_fence_found_by_the_heartbeat_stops_every_step() {
        let steps = [
            Step::ReadIntent,
            Step::Send,
            Step::Extend(Resume::Send),
            Step::CountAttempt,
            Step::Request,
            Step::Lookup,
            Step::RetryLookup,
            Step::Settle(Status::Sent),
            Step::Fail {
                status: 400,
                reason: "x".into(),
            },
            Step::Expire,
            Step::Hold(HoldReason::NoLookup),
        ];
        for s in steps {
            assert_eq!(
                unless_fenced(s.clone(), true),
                Step::Abandon(FencedAt::Heartbeat)
            );
            assert_eq!(unless_fenced(s.clone(), false), s);
        }
        let refused = Step::Abandon(FencedAt::Attempt);
        assert_eq!(unless_fenced(refused.clone(), true), refused);
    }

    #[test]
    fn refused_credentials_never_fail_the_action() {
        assert_eq!(
            after_send(&SendAnswer::CredentialsRefused("unauthorized".into())),
            Step::RetryLookup
        );
        assert_eq!(
            after_send(&SendAnswer::NotCreated("429: never processed".into())),
            Step::RetryLookup
        );
    }

    #[test]
    fn fence_names_are_distinct() {
        let all = [
            FencedAt::Heartbeat,
            FencedAt::Intent,
            FencedAt::Extend,
            FencedAt::Attempt,
            FencedAt::Settle,
            FencedAt::Fail,
            FencedAt::Hold,
        ];
        let names: std::collections::HashSet<_> = all.iter().map(|f| f.as_str()).collect();
        assert_eq!(names.len(), all.len());
        assert_eq!(FencedAt::Heartbeat.as_str(), "heartbeat");
        assert_eq!(FencedAt::Attempt.as_str(), "attempt");
    }
}
