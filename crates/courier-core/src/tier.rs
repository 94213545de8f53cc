//! Guarantee tiers: what a provider offers, and so what courier can promise.
//!
//! The provider contract (`docs/provider-api.md`) has the pair that makes
//! exactly one effect possible: an idempotency key on a send, and a lookup
//! by that key. A provider that lacks one or both is run at a lower tier,
//! set per provider (`courier worker --tier`), and every decision that
//! differs between tiers is a function here, next to `step`'s:
//!
//! | tier | the provider offers | courier promises |
//! |---|---|---|
//! | `a` | a key and a lookup by key | exactly one effect within the key's window |
//! | `a-` | a key, no lookup | exactly one effect within the key's window: a resend with the same key is the lookup; past the window (or the deadline) the action is held `unknown` |
//! | `b` | no dedup, a lookup by the client's reference that may lag | exactly one effect while the lookup lags no more than `lookup_lag_ms`: a "not found" is trusted only once a request's time-out and that lag have passed since the last request left |
//! | `c` (`hold`) | neither | at most one effect: after an unknown outcome nothing is resent; the action is held `unknown` for an operator |
//! | `c` (`resend`) | neither | at least one effect, duplicates possible |
//!
//! The delivery's abstract `Step::Lookup` ("find out what became of the
//! earlier attempts") is what changes: [`find_out`] says, per tier, whether
//! to ask the provider, to resend with the same key, or to hold. A webhook
//! that carries the action's key is evidence at every tier, and merges like
//! any webhook (an `unknown` action then moves on).
//!
//! # Invariants
//! - Tier `c` under `hold` never sends again once a request with the key
//!   may have reached the provider (`Attempts::may_have_reached`): every
//!   path from `Step::Lookup` then ends in `Step::Hold`. Before that (a
//!   refusal of our credentials, a counted attempt that never left) nothing
//!   exists to find out, and it sends as a first attempt would.
//! - Tier `a-` sends again only with the same key, and only while the key's
//!   window (as measured from before the first attempt was counted, less a
//!   request's time-out to land) and the action's deadline are both more
//!   than the send margin away; the window is checked before every request
//!   ([`lease_for`]), not only when the resend is chosen.
//! - Tier `b` never sends on a "not found" answered before
//!   [`not_found_trusted_from_ms`].
//! - Tier `a` decides exactly as `step` alone does.

use crate::lease::LocalLease;
use crate::step::{self, HoldReason, LookupAnswer, Step};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What courier does for a tier-`c` action whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownPolicy {
    /// Never resend: hold the action `unknown` (at most one effect).
    #[default]
    Hold,
    /// Send again (at least one effect, duplicates possible).
    Resend,
}

/// A provider's guarantee tier (module docs); in JSON, its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Tier {
    /// A key and a lookup by key: the contract.
    #[default]
    A,
    /// A key, no lookup.
    AMinus,
    /// No dedup on send; a lookup by reference, with a lag.
    B,
    /// Neither: after an unknown outcome, the policy decides.
    C(UnknownPolicy),
}

impl Tier {
    /// Every tier, for help texts and tests.
    pub const ALL: [Tier; 5] = [
        Tier::A,
        Tier::AMinus,
        Tier::B,
        Tier::C(UnknownPolicy::Hold),
        Tier::C(UnknownPolicy::Resend),
    ];

    /// The tier's name: `a`, `a-`, `b`, `c` (hold) or `c-resend`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::A => "a",
            Tier::AMinus => "a-",
            Tier::B => "b",
            Tier::C(UnknownPolicy::Hold) => "c",
            Tier::C(UnknownPolicy::Resend) => "c-resend",
        }
    }

    /// Whether the provider answers lookups (so the reconciler may ask it).
    pub fn has_lookup(self) -> bool {
        matches!(self, Tier::A | Tier::B)
    }

    /// Whether a worker may run at this tier against a provider that
    /// offers `provider`'s: a provider with a key and a lookup allows every
    /// tier; one with a key only, tier `a-` or `c`; one with a lagging
    /// lookup only, `b` or `c`; one with neither, `c` alone. A worker never
    /// promises more than its provider allows.
    pub fn runs_on(self, provider: Tier) -> bool {
        match (provider, self) {
            (Tier::A, _) => true,
            (_, Tier::C(_)) => true,
            (p, w) => p == w,
        }
    }

    /// The promise a verifier holds a run of this tier to, by the name the
    /// verifier reads (`courier verify --promise`).
    pub fn promise(self) -> &'static str {
        match self {
            Tier::A | Tier::B => "exactly-once",
            Tier::AMinus => "exactly-once-by-resend",
            Tier::C(UnknownPolicy::Hold) => "at-most-once",
            Tier::C(UnknownPolicy::Resend) => "at-least-once",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl From<Tier> for String {
    fn from(t: Tier) -> String {
        t.as_str().to_string()
    }
}

impl TryFrom<String> for Tier {
    type Error = UnknownTier;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tier {0:?}: one of a, a-, b, c, c-resend")]
pub struct UnknownTier(pub String);

impl FromStr for Tier {
    type Err = UnknownTier;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "c-hold" => Ok(Tier::C(UnknownPolicy::Hold)),
            _ => Tier::ALL
                .into_iter()
                .find(|t| t.as_str() == s)
                .ok_or_else(|| UnknownTier(s.to_string())),
        }
    }
}

/// What the delivery knows of its earlier attempts' time, on the local
/// lease clock (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// Tier `a-`: when the key's window ends (the provider forgets the
    /// key), measured from a moment no later than the first attempt's
    /// count: [`key_until_ms`].
    pub key_until_ms: u64,
    /// Tier `b`: from when a "not found" may be trusted:
    /// [`not_found_trusted_from_ms`].
    pub not_found_trusted_from_ms: u64,
    /// Some request with the key may have reached the provider: an earlier
    /// owner counted an attempt (a reclaim), or a request of this delivery
    /// left and got no definite answer. False while every answer so far
    /// says nothing was created (a refusal of our credentials, a counted
    /// attempt that never left).
    pub may_have_reached: bool,
}

/// The last moment a request with the key may leave and still land inside
/// the key's window: `started_ms` is no later than the moment the key's
/// first attempt was counted (the claim that counted it was sent then, or
/// the intent read that found its age was), `retention_ms` how long the
/// provider keeps a key, and a request may take `request_timeout_ms` to
/// land.
pub fn key_until_ms(started_ms: u64, retention_ms: u64, request_timeout_ms: u64) -> u64 {
    started_ms
        .saturating_add(retention_ms)
        .saturating_sub(request_timeout_ms)
}

/// The lease as a tier's decisions see it: at tier `a-` no request may
/// leave after the key's window (a resend there would create), so the
/// window's end stands as a deadline, and every check before a request
/// (`step::before_attempt`, `before_request`) refuses it the same way;
/// the lookup step then holds the action (`find_out`). Other tiers: the
/// lease as it is.
pub fn lease_for(tier: Tier, lease: LocalLease, attempts: Attempts) -> LocalLease {
    match tier {
        Tier::AMinus => LocalLease {
            expires_ms: Some(
                lease
                    .expires_ms
                    .map_or(attempts.key_until_ms, |e| e.min(attempts.key_until_ms)),
            ),
            ..lease
        },
        _ => lease,
    }
}

/// From when a "not found" may be trusted, after a request that left at
/// `left_ms` (or, after a reclaim, the moment the claim was answered: every
/// request of an earlier owner left before its lease ended, which was
/// before that): the request has had its time-out to land, and the lookup
/// its lag to show it.
pub fn not_found_trusted_from_ms(left_ms: u64, request_timeout_ms: u64, lag_ms: u64) -> u64 {
    left_ms
        .saturating_add(request_timeout_ms)
        .saturating_add(lag_ms)
}

/// How a delivery finds out what became of its earlier attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindOut {
    /// Look the key up at the provider (tiers `a` and `b`).
    AskProvider,
    /// No lookup to make: this step instead (a resend with the same key,
    /// or a hold).
    Instead(Step),
}

/// What `Step::Lookup` means for this tier, now.
pub fn find_out(tier: Tier, attempts: Attempts, lease: LocalLease, margin_ms: u64) -> FindOut {
    match tier {
        Tier::A | Tier::B => FindOut::AskProvider,
        // Nothing with this key can have reached the provider: there is
        // nothing to find out, so no tier holds it: it is sent as a first
        // attempt would be, or, past its deadline, ends expired unsent.
        _ if !attempts.may_have_reached && lease.expired(margin_ms) => {
            FindOut::Instead(Step::Expire)
        }
        _ if !attempts.may_have_reached => FindOut::Instead(Step::Send),
        Tier::AMinus if !crate::lease::may_send(lease.now_ms, attempts.key_until_ms, margin_ms) => {
            FindOut::Instead(Step::Hold(HoldReason::KeyWindow))
        }
        Tier::AMinus if lease.expired(margin_ms) => {
            FindOut::Instead(Step::Hold(HoldReason::Deadline))
        }
        // The same key, inside its window: the provider replays or
        // deduplicates, so this send is the lookup.
        Tier::AMinus => FindOut::Instead(Step::Send),
        Tier::C(UnknownPolicy::Hold) => FindOut::Instead(Step::Hold(HoldReason::NoLookup)),
        Tier::C(UnknownPolicy::Resend) if lease.expired(margin_ms) => {
            FindOut::Instead(Step::Hold(HoldReason::Deadline))
        }
        Tier::C(UnknownPolicy::Resend) => FindOut::Instead(Step::Send),
    }
}

/// After a lookup, for a tier that has one: tier `b` takes a "not found"
/// answered before its trust time as no answer (look again after a
/// backoff); otherwise as `step::after_lookup`.
pub fn after_lookup(
    tier: Tier,
    answer: &LookupAnswer,
    attempts: Attempts,
    lease: LocalLease,
    margin_ms: u64,
    lag_ms: u64,
) -> Step {
    let untrusted = tier == Tier::B
        && *answer == LookupAnswer::NotFound
        && lease.now_ms < attempts.not_found_trusted_from_ms;
    if untrusted {
        Step::RetryLookup
    } else {
        step::after_lookup(answer, lease, margin_ms, lag_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    fn lease(now_ms: u64, expires_ms: Option<u64>) -> LocalLease {
        LocalLease {
            now_ms,
            deadline_ms: now_ms + 5_000,
            expires_ms,
        }
    }

    fn attempts(key_until_ms: u64, trusted_from_ms: u64) -> Attempts {
        Attempts {
            key_until_ms,
            not_found_trusted_from_ms: trusted_from_ms,
            may_have_reached: true,
        }
    }

    #[test]
    fn tiers_round_trip_through_their_names() {
        for t in Tier::ALL {
            assert_eq!(t.as_str().parse::<Tier>(), Ok(t));
        }
        assert_eq!("c-hold".parse::<Tier>(), Ok(Tier::C(UnknownPolicy::Hold)));
        assert!("d".parse::<Tier>().is_err());
        for t in Tier::ALL {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(serde_json::from_str::<Tier>(&json).unwrap(), t);
        }
        assert!("A".parse::<Tier>().is_err());
        assert_eq!(Tier::default(), Tier::A);
    }

    #[test]
    fn only_a_and_b_have_a_lookup_and_each_tier_names_its_promise() {
        let with: Vec<Tier> = Tier::ALL.into_iter().filter(|t| t.has_lookup()).collect();
        assert_eq!(with, [Tier::A, Tier::B]);
        let promises: Vec<&str> = Tier::ALL.iter().map(|t| t.promise()).collect();
        assert_eq!(
            promises,
            [
                "exactly-once",
                "exactly-once-by-resend",
                "exactly-once",
                "at-most-once",
                "at-least-once"
            ]
        );
    }

    #[test]
    fn a_worker_never_promises_more_than_its_provider_allows() {
        let c = Tier::C(UnknownPolicy::Hold);
        let c_resend = Tier::C(UnknownPolicy::Resend);
        for w in Tier::ALL {
            assert!(w.runs_on(Tier::A), "{w} on a");
            assert!(w.runs_on(w), "{w} on itself");
        }
        assert!(c.runs_on(Tier::AMinus) && c_resend.runs_on(Tier::B));
        assert!(c_resend.runs_on(c), "hold or resend is the worker's policy");
        assert!(!Tier::A.runs_on(Tier::AMinus) && !Tier::A.runs_on(c));
        assert!(!Tier::B.runs_on(Tier::AMinus) && !Tier::AMinus.runs_on(Tier::B));
        assert!(!Tier::AMinus.runs_on(c) && !Tier::B.runs_on(c));
    }

    #[test]
    fn a_and_b_ask_the_provider_whatever_the_time() {
        for tier in [Tier::A, Tier::B] {
            for l in [lease(0, None), lease(9_000, Some(1_000))] {
                assert_eq!(find_out(tier, attempts(0, 0), l, 500), FindOut::AskProvider);
            }
        }
    }

    #[test]
    fn a_minus_resends_the_same_key_only_inside_its_window_and_the_deadline() {
        let t = Tier::AMinus;
        let a = attempts(10_000, 0);
        assert_eq!(
            find_out(t, a, lease(9_499, None), 500),
            FindOut::Instead(Step::Send)
        );
        // Within the margin of the window's end, and past it: held.
        for now in [9_500, 20_000] {
            assert_eq!(
                find_out(t, a, lease(now, None), 500),
                FindOut::Instead(Step::Hold(HoldReason::KeyWindow))
            );
        }
        // The deadline first: no resend after it, whatever the window.
        assert_eq!(
            find_out(t, a, lease(1_000, Some(1_400)), 500),
            FindOut::Instead(Step::Hold(HoldReason::Deadline))
        );
    }

    #[test]
    fn at_a_minus_the_key_window_is_a_deadline_for_every_request() {
        let a = attempts(10_000, 0);
        // Without a deadline of its own, the window's end stands as one.
        let l = lease_for(Tier::AMinus, lease(9_499, None), a);
        assert_eq!(l.expires_ms, Some(10_000));
        assert!(l.may_send(500));
        assert!(!lease_for(Tier::AMinus, lease(9_500, None), a).may_send(500));
        // A count that passed, then a request too late: refused, and the
        // lookup step holds it for the window, not the deadline.
        let late = lease_for(Tier::AMinus, lease(9_600, Some(50_000)), a);
        assert_eq!(step::before_request(late, 500), Step::Lookup);
        assert_eq!(
            find_out(Tier::AMinus, a, late, 500),
            FindOut::Instead(Step::Hold(HoldReason::KeyWindow))
        );
        // The earlier of the two ends wins; other tiers keep their lease.
        let early = lease_for(Tier::AMinus, lease(0, Some(4_000)), a);
        assert_eq!(early.expires_ms, Some(4_000));
        for t in [Tier::A, Tier::B, Tier::C(UnknownPolicy::Hold)] {
            assert_eq!(lease_for(t, lease(0, None), a), lease(0, None));
        }
    }

    #[test]
    fn without_a_request_that_may_have_reached_the_provider_nothing_is_held() {
        let none = Attempts {
            may_have_reached: false,
            ..attempts(10_000, 0)
        };
        for t in [
            Tier::AMinus,
            Tier::C(UnknownPolicy::Hold),
            Tier::C(UnknownPolicy::Resend),
        ] {
            assert_eq!(
                find_out(t, none, lease(0, None), 500),
                FindOut::Instead(Step::Send)
            );
            // Past its deadline it ends expired: no request ever left.
            assert_eq!(
                find_out(t, none, lease(1_000, Some(1_400)), 500),
                FindOut::Instead(Step::Expire)
            );
        }
        // Tiers with a lookup still ask.
        assert_eq!(
            find_out(Tier::A, none, lease(0, None), 500),
            FindOut::AskProvider
        );
    }

    #[test]
    fn c_holds_or_resends_by_its_policy() {
        let a = attempts(0, 0);
        for l in [lease(0, None), lease(1_000, Some(1_400))] {
            assert_eq!(
                find_out(Tier::C(UnknownPolicy::Hold), a, l, 500),
                FindOut::Instead(Step::Hold(HoldReason::NoLookup))
            );
        }
        let resend = Tier::C(UnknownPolicy::Resend);
        assert_eq!(
            find_out(resend, a, lease(0, None), 500),
            FindOut::Instead(Step::Send)
        );
        assert_eq!(
            find_out(resend, a, lease(1_000, Some(1_400)), 500),
            FindOut::Instead(Step::Hold(HoldReason::Deadline))
        );
    }

    #[test]
    fn b_trusts_a_not_found_only_after_its_trust_time() {
        let nf = &LookupAnswer::NotFound;
        let a = attempts(0, not_found_trusted_from_ms(1_000, 2_000, 3_000));
        assert_eq!(a.not_found_trusted_from_ms, 6_000);
        assert_eq!(
            after_lookup(Tier::B, nf, a, lease(5_999, None), 500, 0),
            Step::RetryLookup
        );
        assert_eq!(
            after_lookup(Tier::B, nf, a, lease(6_000, None), 500, 0),
            Step::Send
        );
        // Tier a trusts it at once; a message found settles at any time.
        assert_eq!(
            after_lookup(Tier::A, nf, a, lease(0, None), 500, 0),
            Step::Send
        );
        let found = &LookupAnswer::Found(Status::Sent);
        assert_eq!(
            after_lookup(Tier::B, found, a, lease(0, None), 500, 0),
            Step::Settle(Status::Sent)
        );
        assert_eq!(
            after_lookup(
                Tier::B,
                &LookupAnswer::Unknown,
                a,
                lease(9_000, None),
                500,
                0
            ),
            Step::RetryLookup
        );
    }

    #[test]
    fn windows_and_trust_times_saturate() {
        assert_eq!(key_until_ms(1_000, 3_600_000, 2_000), 3_599_000);
        assert_eq!(key_until_ms(u64::MAX, 1, 0), u64::MAX);
        assert_eq!(key_until_ms(0, 1_000, 2_000), 0);
        assert_eq!(not_found_trusted_from_ms(u64::MAX, 1, 1), u64::MAX);
    }
}
