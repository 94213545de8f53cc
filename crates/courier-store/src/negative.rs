//! The store's negative controls: the same store with one rule broken on
//! purpose (or, for the claims' plans, one setting left to the server), so
//! that a test can show its checker catches what the rule prevents.
//! Compiled only with the `negative-controls` feature, which the store's
//! own tests turn on (its dev-dependency on itself) and no binary does.
//!
//! # Invariants
//! - Nothing outside a test sets a switch: without the feature there is no
//!   switch to set, and `Switches` (in `switches.rs`) is all off.

use crate::pool::PgStore;
pub(crate) use crate::switches::Switches;

impl PgStore {
    /// The rules this store breaks on purpose: none, outside a negative
    /// control.
    pub(crate) fn switches(&self) -> Switches {
        #[cfg(feature = "negative-controls")]
        return self.switches;
        #[cfg(not(feature = "negative-controls"))]
        Switches::default()
    }
}

#[cfg(feature = "negative-controls")]
impl PgStore {
    fn with_switch(&self, set: impl FnOnce(&mut Switches)) -> PgStore {
        let mut control = self.clone();
        set(&mut control.switches);
        control
    }

    /// The same store with merges that lock their action rows whatever the
    /// rows' state: the locking invariant broken on purpose, so that
    /// `tests/locks.rs` can show its interleaving deadlocks then.
    pub fn with_merges_locking_claimed_actions(&self) -> PgStore {
        self.with_switch(|s| s.merges_lock_claimed_actions = true)
    }

    /// The same store with merges that commit although some of their event
    /// ids were recorded by another transaction after they looked: the
    /// check broken on purpose, so that `tests/batch.rs` can show one id
    /// applied to two keys then.
    pub fn with_merges_ignoring_ids_recorded_meanwhile(&self) -> PgStore {
        self.with_switch(|s| s.merges_ignore_ids_recorded_meanwhile = true)
    }

    /// The same store whose sweep of `store_work` checks for pending work
    /// without locking the store rows first (in one statement, one
    /// snapshot): the maintenance broken on purpose, so that
    /// `tests/store_work.rs` can show its checker catches a store with work
    /// missing from `store_work`.
    pub fn with_store_work_sweep_unlocked(&self) -> PgStore {
        self.with_switch(|s| s.store_work_sweep_unlocked = true)
    }

    /// The same store whose claims run with the server's planner settings
    /// (custom plans for the fair claim, planned per call): the control of
    /// the test that claims run with their generic plan (`tests/plans.rs`).
    pub fn with_claim_custom_plans(&self) -> PgStore {
        self.with_switch(|s| s.claim_custom_plans = true)
    }
}
