//! The rules a store breaks on purpose in a negative control: the state
//! `PgStore` carries (with the `negative-controls` feature) and `negative`
//! sets. A module of its own, so that the pool holds it without depending
//! on the negative controls' code.

/// Which rules a store breaks on purpose. All off, always, without the
/// `negative-controls` feature.
#[derive(Debug, Clone, Copy, Default)]
// Without the feature the sweep's broken statement is not compiled, so
// nothing reads its switch.
#[cfg_attr(not(feature = "negative-controls"), allow(dead_code))]
pub(crate) struct Switches {
    /// Merges lock their action rows whatever the rows' state
    /// (`PgStore::with_merges_locking_claimed_actions`).
    pub merges_lock_claimed_actions: bool,
    /// Merges commit although some of their event ids were recorded by
    /// another transaction after they looked
    /// (`PgStore::with_merges_ignoring_ids_recorded_meanwhile`).
    pub merges_ignore_ids_recorded_meanwhile: bool,
    /// The sweep of `store_work` checks for work without locking first
    /// (`PgStore::with_store_work_sweep_unlocked`).
    pub store_work_sweep_unlocked: bool,
    /// Claims leave the plan to the server instead of forcing the generic
    /// one (`PgStore::with_claim_custom_plans`).
    pub claim_custom_plans: bool,
}
