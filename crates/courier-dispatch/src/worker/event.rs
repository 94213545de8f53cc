//! What the worker reports: one [`Event`] per thing it did or found, handed
//! to [`super::context::Ctx::observe`] (in `observe.rs`), the one place that
//! counts it.

use courier_core::step::{FencedAt, HoldReason, SendAnswer};
use courier_core::Status;
use courier_provider::{LookupOutcome, SendOutcome};
use courier_store::{Lease, ScheduleTick, StoreError};
use std::time::Duration;

/// Who looked a key up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Looker {
    Delivery,
    Reconciler,
}

/// Something the worker did or found, worth counting.
pub(super) enum Event<'a> {
    /// One claim statement ran and returned `found` actions.
    ClaimRan {
        took: Duration,
        found: usize,
    },
    /// An action was claimed; `reclaimed` when another owner's lease had run out.
    Claimed {
        lease: &'a Lease,
        reclaimed: bool,
    },
    Sent {
        action_id: i64,
        outcome: &'a SendOutcome,
        answer: &'a SendAnswer,
    },
    LookedUp {
        action_id: i64,
        key: &'a str,
        outcome: &'a LookupOutcome,
        by: Looker,
    },
    Settled {
        action_id: i64,
        status: Status,
    },
    /// The provider refused the action, and it was marked failed.
    Failed {
        action_id: i64,
        reason: &'a str,
    },
    /// A claimed action's deadline passed with no message at the provider;
    /// it was marked expired.
    Expired {
        action_id: i64,
    },
    /// Nothing could tell whether an earlier attempt went out (the
    /// provider's tier); the action was held `unknown` (its `events` row
    /// written by the same statement).
    Held {
        action_id: i64,
        reason: HoldReason,
    },
    /// One tick of the schedule ran.
    ScheduleTicked {
        tick: ScheduleTick,
    },
    /// A fenced operation found another owner; the delivery stops.
    Fenced {
        lease: &'a Lease,
        at: FencedAt,
        current_epoch: Option<i64>,
    },
    /// The provider is paused for `ms` more: it answered "too many
    /// requests" to this worker (`shared` false), or another worker's pause
    /// came back with a claim (`shared` true).
    ProviderPaused {
        ms: u64,
        shared: bool,
    },
    /// A store call failed and will be retried.
    StoreRetry {
        error: &'a StoreError,
    },
    /// A loop's store call failed; the loop goes on and calls again at its
    /// next turn (`call`: "heartbeat", "store_work sweep").
    LoopCallFailed {
        call: &'static str,
        error: &'a StoreError,
    },
}
