//! courier-store: the only crate that speaks SQL.
//!
//! Every statement of the protocol (enqueue, claims, leases, the outbox,
//! settles, merges, events, the reports) lives in a file under `sql/`, one
//! per statement and named entity-then-verb, loaded with `include_str!`; the
//! read-only operator views (`views`) and the views of a run shared by the
//! benchmarks, the adapter and tests ([`run_views`]) keep their SQL beside
//! their code; the benchmarks' own SQL is in `courier-bench` (a claim is composed of three
//! files: its head, its own middle and the shared tail; the outbox status
//! write and the event insert are fragments shared by every statement that
//! does them). Each write has one form: settles and merges exist only as
//! batches, and a single settle or merge is a batch of one.
//!
//! - [`cluster`]: the managed local PostgreSQL cluster.
//! - [`migrate`]: versioned SQL migrations (`migrations/*.sql`), some outside a
//!   transaction (`CREATE INDEX CONCURRENTLY`); who applies them is said there.
//! - [`PgStore`] (`pool`): the connection pool and the [`Clock`] the
//!   statements take their time from.
//! - `action`: enqueue and read actions. `lease`: claims, heartbeats and the
//!   fence. `outbox`: the send intent, attempts, reconciling checks.
//!   `settle`: the owner's settles, fails and expiries. `intent`: the
//!   schedule's tick (due actions promoted, unclaimed ones expired), cancel
//!   and re-drive (migration 23). `merge`: reports that carry no
//!   lease (webhooks, reconciling lookups). `event`: notable moments.
//!   `report`: counts for the CLI and the verifier. `views`: read-only views
//!   for operators. `prune`: retention (bounded batches under an advisory
//!   lock) and the fold of the maintained counts (migration 6).
//!   `replication`: the node the store writes to and its standbys' lag.
//!   `token`: API tokens (who may send), their scopes and their version.
//!
//! # Invariants
//! - Every write after a claim checks `(owner, epoch)`; zero rows is
//!   [`Fenced`], an expected outcome returned as data, not an error.
//! - No two transactions wait for each other in a cycle, for these reasons
//!   (`tests/locks.rs` runs the interleaving that would deadlock otherwise,
//!   and shows that it does when the first rule is broken on purpose):
//!   1. *Lease writers and merges never wait for each other's action rows.*
//!      The lease writers (intent, attempt, settle, fail) lock an action row
//!      only while it is `claimed`, and take it before its outbox row. Merges
//!      (webhooks, lookups) lock outbox rows first (by action id) and write
//!      an action row only when it is `dispatched`; a claimed row, locked or
//!      not, does not match their update and is passed over without waiting.
//!      So a lease writer may wait for a merge's outbox row, never the
//!      reverse.
//!   2. *Writers of one kind take their rows in one order:* settles lock
//!      action rows by id, merges lock outbox rows by action id.
//!   3. *Claims and heartbeats never wait for an action row* (SKIP LOCKED).
//!      The fair claim takes its store rows with SKIP LOCKED too. The FIFO
//!      claim does wait, for the store rows of what it took, which it locks
//!      in name order; nothing else that waits locks a store row
//!      exclusively, because settles and fails release their slot by
//!      appending to `store_releases` (migration 2), not by updating the
//!      store row, and an enqueue takes no lock on it at all (migration 11:
//!      a key-share lock there made claims with older snapshots wait, SKIP
//!      LOCKED notwithstanding; `tests/claim_waits.rs`). An enqueue waits at
//!      most for a sweep of `store_work`, which never waits.
//!   4. *A cancel or a re-drive waits for one action row* (FOR UPDATE, so
//!      for a claim that holds it) and holds nothing a claim waits for; the
//!      schedule's tick takes its action rows SKIP LOCKED.
//! - Every store with a pending action has a row in `store_work`, the
//!   stores the fair claim walks (migration 5): a trigger adds it in the
//!   enqueue's transaction, and `courier.promote_due` in the transaction
//!   that makes scheduled actions pending (migration 23), each after taking
//!   the store's shared advisory lock (migration 11), and only `courier_store_work_sweep` removes rows, after
//!   locking the store row FOR UPDATE SKIP LOCKED (against claims) and
//!   trying the exclusive advisory lock (against enqueues; a store it cannot
//!   have is skipped), with a snapshot taken after both
//!   (`tests/store_work.rs` races enqueues with claims, and catches a sweep
//!   broken on purpose; [`PgStore::store_work_missing`] is the check).
//! - A committed action is pending if and only if it has a committed row in
//!   `actions_ready`, the table the claims find pending work in (migration
//!   12), and scheduled if and only if it has one in `actions_scheduled`,
//!   the table the schedule's tick walks by time (migration 23): triggers on `actions` add and remove the rows in the transaction
//!   of each change, and the claims lock the action row and re-check its
//!   state before taking it (`tests/actions_ready.rs` races enqueues, claims
//!   and settles, and catches a trigger disabled on purpose;
//!   [`PgStore::actions_ready_mismatch`] is the check).
//! - A store's in-flight count (`store_in_flight`) never exceeds the cap: a
//!   claim folds only the releases it deletes, and a release it cannot see
//!   yet only makes it count more in flight.
//! - A report is merged forward only (`courier_core::status::fold_report`),
//!   in the same transaction as the webhook event id that carried it.
//! - The statements that decide by the time (claim, reclaim, heartbeat,
//!   the attempt's margin, settle, fail, merge, the reconciler's pick, the
//!   reports, the pruner) read it from the store's [`Clock`]: the
//!   database's `now()` in production, a clock that tests move instead of
//!   sleeping (`tests/clock.rs`).

/// The text of statements in `sql/`, joined in order (`sql!("lease/heartbeat")`).
macro_rules! sql {
    ($($name:literal),+ $(,)?) => {
        concat!($(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", $name, ".sql"))),+)
    };
}

mod action;
mod clock;
pub mod cluster;
mod connect;
mod counts;
mod decode;
mod error;
mod event;
mod flow;
mod held;
mod intent;
mod lease;
mod merge;
pub mod migrate;
mod negative;
mod outbox;
mod plan;
mod pool;
mod prune;
mod replication;
mod report;
pub mod run_views;
mod settle;
mod switches;
mod token;
mod views;

pub use action::*;
pub use clock::Clock;
pub use counts::Counts;
pub use error::StoreError;
pub use flow::{FlowError, ProviderFlow, StoreFlow};
pub use held::{Held, HeldUnknown, Resolution, ResolveOutcome};
pub use intent::{CancelOutcome, RedriveOutcome, ScheduleTick, ScheduledDue};
pub use lease::*;
pub use merge::*;
pub use outbox::*;
pub use plan::PLAN_BY_KEY;
pub use pool::*;
pub use prune::*;
pub use replication::{Replication, StandbyLag};
pub use report::*;
pub use settle::*;
pub use token::{ActiveToken, TokenError, TokenInfo};
pub use views::*;
