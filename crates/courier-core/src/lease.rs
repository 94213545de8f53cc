//! A lease as one worker process measures it, on its own monotonic clock.
//!
//! The database decides who holds an action (the lease and its epoch); this
//! local view only decides whether a request may still leave. Its deadline
//! must never be later than the database's: it is measured from the moment
//! the statement that granted or renewed the lease was *sent*, which is no
//! later than the moment the database started it.
//!
//! # Invariants
//! - A local deadline is `sent_ms + lease_ttl_ms` of the statement that set
//!   it, never later.
//! - A local deadline only moves later ([`renewed_deadline_ms`]): a renewal
//!   answered after a later one cannot shorten it.

/// Whether a request may leave now, given the lease deadline as this process
/// measured it (monotonic milliseconds) and a safety margin: the check the
/// worker makes immediately before every send, because a fence in the database
/// cannot stop a request that never touches the database.
pub fn may_send(now_ms: u64, lease_deadline_ms: u64, margin_ms: u64) -> bool {
    now_ms.saturating_add(margin_ms) < lease_deadline_ms
}

/// The lease of one action as this process sees it now, with the action's
/// deadline (`expires_at`) on the same clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLease {
    /// This process's monotonic clock, in milliseconds.
    pub now_ms: u64,
    /// The lease end on the same clock.
    pub deadline_ms: u64,
    /// The action's `expires_at` on the same clock, measured like the lease
    /// (from the moment the claim was sent, so never later than the
    /// database's); `None`: no deadline.
    pub expires_ms: Option<u64>,
}

impl LocalLease {
    /// Whether a request may leave now: `margin_ms` before the lease ends,
    /// and `margin_ms` before the action expires.
    pub fn may_send(self, margin_ms: u64) -> bool {
        may_send(self.now_ms, self.deadline_ms, margin_ms) && !self.expired(margin_ms)
    }

    /// Whether the action's deadline is within `margin_ms` or past: no
    /// request may leave any more.
    pub fn expired(self, margin_ms: u64) -> bool {
        self.expires_ms
            .is_some_and(|e| !may_send(self.now_ms, e, margin_ms))
    }

    /// Whether `lag_ms` has passed since the action's deadline: every
    /// request (each left `margin_ms` before it) has had that long to show
    /// in the provider's lookups.
    pub fn past_deadline_by(self, lag_ms: u64) -> bool {
        self.expires_ms
            .is_some_and(|e| self.now_ms >= e.saturating_add(lag_ms))
    }
}

/// The local deadline of an action that expires `expires_in_ms` after the
/// time of the claim sent at `sent_ms` (negative: already past), measured
/// like [`deadline_ms`].
pub fn expires_ms(sent_ms: u64, expires_in_ms: Option<i64>) -> Option<u64> {
    expires_in_ms.map(|d| {
        if d >= 0 {
            sent_ms.saturating_add(d as u64)
        } else {
            sent_ms.saturating_sub(d.unsigned_abs())
        }
    })
}

/// The local deadline of a lease granted (or renewed) by a statement sent at
/// `sent_ms`. The database started the lease after the statement was sent,
/// so measuring from the send errs on the safe side; the first send of a
/// fresh action relies on this deadline alone.
pub fn deadline_ms(sent_ms: u64, lease_ttl_ms: u64) -> u64 {
    sent_ms.saturating_add(lease_ttl_ms)
}

/// The deadline after a renewal sent at `sent_ms` was answered "held".
pub fn renewed_deadline_ms(current_ms: u64, sent_ms: u64, lease_ttl_ms: u64) -> u64 {
    current_ms.max(deadline_ms(sent_ms, lease_ttl_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_stop_before_the_margin() {
        assert!(may_send(1_000, 2_000, 500));
        assert!(!may_send(1_500, 2_000, 500));
        assert!(!may_send(2_500, 2_000, 0));
        assert!(!may_send(u64::MAX, 2_000, 10));
    }

    #[test]
    fn a_deadline_counts_from_the_moment_the_statement_was_sent() {
        assert_eq!(deadline_ms(1_000, 5_000), 6_000);
        assert_eq!(deadline_ms(u64::MAX - 1, 5_000), u64::MAX);
    }

    #[test]
    fn a_late_answer_never_shortens_the_deadline() {
        // A renewal sent at 2,000 answered after one sent at 3,000.
        assert_eq!(renewed_deadline_ms(8_000, 2_000, 5_000), 8_000);
        assert_eq!(renewed_deadline_ms(6_000, 3_000, 5_000), 8_000);
    }

    #[test]
    fn the_local_lease_check_is_the_margin_check() {
        let l = LocalLease {
            now_ms: 4_499,
            deadline_ms: 5_000,
            expires_ms: None,
        };
        assert!(l.may_send(500));
        assert!(!LocalLease { now_ms: 4_500, ..l }.may_send(500));
    }

    #[test]
    fn the_deadline_stops_sends_with_the_same_margin() {
        let l = LocalLease {
            now_ms: 1_000,
            deadline_ms: 5_000,
            expires_ms: Some(1_600),
        };
        assert!(l.may_send(500) && !l.expired(500));
        let late = LocalLease { now_ms: 1_100, ..l };
        assert!(!late.may_send(500) && late.expired(500));
        assert!(!late.past_deadline_by(0));
        assert!(LocalLease { now_ms: 1_600, ..l }.past_deadline_by(0));
        assert!(!LocalLease { now_ms: 3_599, ..l }.past_deadline_by(2_000));
        assert!(LocalLease { now_ms: 3_600, ..l }.past_deadline_by(2_000));
        let none = LocalLease {
            expires_ms: None,
            ..late
        };
        assert!(none.may_send(500) && !none.expired(500) && !none.past_deadline_by(0));
    }

    #[test]
    fn a_deadline_counts_from_the_claim_sent() {
        assert_eq!(expires_ms(1_000, None), None);
        assert_eq!(expires_ms(1_000, Some(2_500)), Some(3_500));
        assert_eq!(expires_ms(1_000, Some(-400)), Some(600));
        assert_eq!(expires_ms(100, Some(-400)), Some(0));
    }
}
