//! The harness every benchmark runs on, so that a benchmark is its config,
//! its rounds, its samples and a pure verdict:
//! - `server`: the run's PostgreSQL cluster, `pg_stat_statements` loaded
//!   as the run asks, stopped whatever the run returned;
//! - in-process workers: `courier_inproc::WorkerPool::start` with
//!   `bench_worker`'s settings;
//! - `drain`: the one wait for work to be done, always with a deadline;
//! - [`probe`]: the samplers a run switches on when it investigates.
//!
//! # Invariants
//! - A benchmark's workers run no maintenance (no pruner, no reconciler
//!   unless the benchmark turns it on for one worker): the figures measure
//!   the protocol alone.
//! - A cluster is stopped on every path out of a run.

pub(crate) mod drain;
pub mod probe;
pub(crate) mod server;

use courier_core::Limits;
use courier_dispatch::worker::WorkerConfig;
use courier_store::ClaimMode;

/// The settings of a benchmark's workers, for `WorkerPool::start`, which
/// names worker `i` `{owner}-w{i}` and seeds it with `seed + i`.
pub(crate) fn bench_worker(
    limits: Limits,
    claim_mode: ClaimMode,
    owner: String,
    idle_poll_ms: u64,
    seed: u64,
) -> WorkerConfig {
    WorkerConfig {
        limits,
        claim_mode,
        owner,
        idle_poll_ms,
        reconcile: false,
        // No maintenance: the figures measure the protocol alone.
        pruner: None,
        seed,
        // The contract's tier: the fake provider and the stub follow it.
        tier: courier_core::Tier::A,
        provider_gate: None,
    }
}
