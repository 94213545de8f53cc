//! When a claimer looks for expired leases, and when it sweeps the stores
//! its claims may have emptied from `store_work`: the one place that paces
//! both. The store keeps no state between claims
//! (`courier_store::ClaimReq::reclaim`, `courier_store::ClaimTaken::sweep`);
//! the claimer ([`super::claim`]) asks these two, and so does any other
//! loop of claims (`courier bench scale`'s claimers). Pure: the times come
//! in, on the caller's clock (`tokio::time`), so the tests below pass them.
//!
//! # Invariants
//! - The first claim looks for expired leases, and so does the claim after
//!   one that came back short; while claims come back full, one looks at
//!   most every [`RECLAIM_EVERY_MS`].
//! - A sweep held back names each store once, and is due once it names
//!   [`SWEEP_STORES_MAX`] stores or has waited [`SWEEP_WAIT_MAX`].

use std::time::Duration;
use tokio::time::Instant;

/// How often a claimer's claims look for expired leases while they come
/// back full. The look walks an index of leases from its oldest end, past
/// an entry left by every action that moved on since the last vacuum: in
/// the partial index `actions_lease` of `actions` before migration 13,
/// 17,877 buffers, 11.7 ms of a 33 ms claim after a round of `courier bench
/// history`; in `actions_held_lease` since, a small table that autovacuum
/// visits often, but still up to a minute of dead entries. Paid once a
/// second instead of by every claim. A claim that comes back short (its
/// worker has room and nothing pending was found) makes the next one look
/// at once, so an idle worker rescues an expired lease as soon as it polls;
/// a busy one within a second.
pub const RECLAIM_EVERY_MS: u64 = 1_000;

/// A sweep may wait this long for later claims' sweeps to run with them.
/// Until it runs, the stores it owes stay in `store_work` (a claim walks
/// past a store without work at the cost of one probe, and an enqueue for
/// it finds its row in place).
pub const SWEEP_WAIT_MAX: Duration = Duration::from_millis(20);
/// A sweep held back runs once it owes this many stores.
pub const SWEEP_STORES_MAX: usize = 32;

/// Whether the next claim looks for expired leases.
#[derive(Debug, Default)]
pub struct ReclaimPacing {
    /// From when the claims look again; `None`: the next one looks.
    next: Option<Instant>,
}

impl ReclaimPacing {
    /// Whether a claim sent at `now` looks for expired leases.
    pub fn look(&self, now: Instant) -> bool {
        self.next.is_none_or(|next| now >= next)
    }

    /// After a claim sent at `sent` that looked (or not) and took `took` of
    /// the `asked` actions.
    pub fn claimed(&mut self, sent: Instant, looked: bool, asked: usize, took: usize) {
        debug_assert!(took <= asked, "a claim took {took} of {asked}");
        if took < asked {
            self.next = None;
        } else if looked {
            self.next = Some(sent + Duration::from_millis(RECLAIM_EVERY_MS));
        }
    }
}

/// The sweep held back: the stores the claims may have emptied, and since when.
#[derive(Debug, Default)]
pub struct SweepPacing {
    stores: Vec<String>,
    since: Option<Instant>,
}

impl SweepPacing {
    /// Adds a claim's stores (each store once) to the sweep held back.
    pub fn owe(&mut self, stores: Vec<String>, now: Instant) {
        for s in stores {
            if !self.stores.contains(&s) {
                self.stores.push(s);
            }
        }
        if !self.stores.is_empty() && self.since.is_none() {
            self.since = Some(now);
        }
    }

    /// The sweep to run now, if it is due: it owes [`SWEEP_STORES_MAX`]
    /// stores or has waited [`SWEEP_WAIT_MAX`] (an idle claimer asks again
    /// within its poll interval, so it runs at most one poll late).
    pub fn due(&mut self, now: Instant) -> Option<Vec<String>> {
        let due = self.stores.len() >= SWEEP_STORES_MAX
            || self
                .since
                .is_some_and(|since| now.duration_since(since) >= SWEEP_WAIT_MAX);
        if due {
            self.take()
        } else {
            None
        }
    }

    /// The sweep held back, due or not (the claimer is about to wait for
    /// room, or stops).
    pub fn take(&mut self) -> Option<Vec<String>> {
        self.since = None;
        (!self.stores.is_empty()).then(|| std::mem::take(&mut self.stores))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn full_claims_look_for_expired_leases_once_a_second_short_ones_make_the_next_look() {
        let t0 = Instant::now();
        let mut p = ReclaimPacing::default();
        assert!(p.look(t0), "the first claim looks");
        p.claimed(t0, true, 8, 8);
        assert!(
            !p.look(t0 + ms(999)),
            "a full claim's next looks a second later"
        );
        p.claimed(t0 + ms(500), false, 8, 8);
        assert!(
            !p.look(t0 + ms(999)),
            "a full claim that did not look moves nothing"
        );
        assert!(p.look(t0 + ms(RECLAIM_EVERY_MS)));
        p.claimed(t0 + ms(1_000), true, 8, 8);
        assert!(!p.look(t0 + ms(1_001)));
        p.claimed(t0 + ms(1_001), false, 8, 3);
        assert!(p.look(t0 + ms(1_002)), "after a short claim the next looks");
    }

    #[test]
    fn a_sweep_is_due_after_its_wait_or_once_it_owes_enough_stores() {
        let t0 = Instant::now();
        let mut p = SweepPacing::default();
        p.owe(Vec::new(), t0);
        assert_eq!(p.take(), None, "nothing owed, nothing to run");
        p.owe(vec!["s1".into()], t0);
        p.owe(vec!["s2".into(), "s1".into()], t0 + ms(5));
        assert_eq!(p.due(t0 + ms(19)), None);
        assert_eq!(
            p.due(t0 + SWEEP_WAIT_MAX),
            Some(vec!["s1".to_string(), "s2".to_string()]),
            "due after the first claim's wait, each store once"
        );
        assert_eq!(p.due(t0 + ms(100)), None, "taken");
        let many: Vec<String> = (0..SWEEP_STORES_MAX).map(|i| format!("s{i}")).collect();
        p.owe(many.clone(), t0 + ms(200));
        assert_eq!(
            p.due(t0 + ms(200)),
            Some(many),
            "due at once when it owes enough"
        );
        p.owe(vec!["s9".into()], t0 + ms(300));
        assert_eq!(
            p.take(),
            Some(vec!["s9".to_string()]),
            "taken before it was due"
        );
        assert_eq!(p.due(t0 + ms(400)), None, "and its wait went with it");
    }
}
