//! The states of an action, in the order of its life.
//!
//! `[scheduled ->] pending -> claimed -> dispatched -> done`, or `claimed ->
//! failed` when the provider refused the action; a reclaim keeps an action
//! `claimed` (at a new epoch). A scheduled or pending action may end
//! `cancelled` (by a caller) or `expired` (its `expires_at` passed); a
//! claimed one may end `expired` when its owner found the deadline passed
//! and the provider without the message. A claimed one ends `unknown` when
//! its provider's guarantee tier gives no way to learn whether an earlier
//! attempt went out (`courier_core::tier`): it waits there for a webhook
//! that carries its key (then `dispatched` or `done`) or for an operator,
//! who resolves it as sent (`done`) or not sent (`failed`, which a re-drive
//! admits). The database's copy of this list is the CHECK on
//! `actions.state` (migration 25); a store test asserts that the two list
//! the same states.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The state of one action (`actions.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionState {
    /// Enqueued with a `not_before` still ahead: no claim sees it yet.
    Scheduled,
    /// Enqueued, waiting for a claim.
    Pending,
    /// Held by a worker under a lease (counted in its store's in-flight).
    Claimed,
    /// Settled by its owner: the provider has it; its final status may follow.
    Dispatched,
    /// Its final status is known (delivered or failed, no conflict).
    Done,
    /// The provider refused it; never resent.
    Failed,
    /// Cancelled before any worker claimed it: nothing was sent.
    Cancelled,
    /// Not sent before its `expires_at`, and never will be.
    Expired,
    /// Held: an attempt may or may not have reached the provider, and its
    /// tier offers no way to tell (no lookup, or the key's window passed).
    /// Never resent; listed for an operator, who resolves it.
    Unknown,
}

impl ActionState {
    /// Every state, in the order of an action's life.
    pub const ALL: [ActionState; 9] = [
        ActionState::Scheduled,
        ActionState::Pending,
        ActionState::Claimed,
        ActionState::Dispatched,
        ActionState::Done,
        ActionState::Failed,
        ActionState::Cancelled,
        ActionState::Expired,
        ActionState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Scheduled => "scheduled",
            ActionState::Pending => "pending",
            ActionState::Claimed => "claimed",
            ActionState::Dispatched => "dispatched",
            ActionState::Done => "done",
            ActionState::Failed => "failed",
            ActionState::Cancelled => "cancelled",
            ActionState::Expired => "expired",
            ActionState::Unknown => "unknown",
        }
    }

    /// True when nothing will change the action any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ActionState::Done | ActionState::Failed | ActionState::Cancelled | ActionState::Expired
        )
    }

    /// True when no worker will touch it again: final, or held `unknown`
    /// (only a webhook carrying its key, or an operator, moves it on).
    pub fn is_at_rest(self) -> bool {
        self.is_final() || self == ActionState::Unknown
    }

    /// True while a caller may still cancel it: no worker holds it, so no
    /// request can be on the wire.
    pub fn is_cancellable(self) -> bool {
        matches!(self, ActionState::Scheduled | ActionState::Pending)
    }
}

impl fmt::Display for ActionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so that widths and alignment (`{:<12}`) apply.
        f.pad(self.as_str())
    }
}

impl AsRef<str> for ActionState {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// So that callers holding a state's name (`"done"`) can compare with it.
impl PartialEq<&str> for ActionState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown action state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for ActionState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ActionState::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_text_and_serde() {
        for s in ActionState::ALL {
            assert_eq!(s.as_str().parse::<ActionState>(), Ok(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert!("queued".parse::<ActionState>().is_err());
        assert_eq!(format!("{:<9}|", ActionState::Done), "done     |");
        assert!(ActionState::Done == "done" && ActionState::Done != "failed");
    }

    #[test]
    fn the_final_and_the_cancellable_states() {
        let finals: Vec<ActionState> = ActionState::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .collect();
        assert_eq!(
            finals,
            [
                ActionState::Done,
                ActionState::Failed,
                ActionState::Cancelled,
                ActionState::Expired
            ]
        );
        let cancellable: Vec<ActionState> = ActionState::ALL
            .into_iter()
            .filter(|s| s.is_cancellable())
            .collect();
        assert_eq!(cancellable, [ActionState::Scheduled, ActionState::Pending]);
        let resting: Vec<ActionState> = ActionState::ALL
            .into_iter()
            .filter(|s| s.is_at_rest() && !s.is_final())
            .collect();
        assert_eq!(resting, [ActionState::Unknown]);
    }
}
