//! What the courier promises about each action's effects, and so which
//! checks of the log break that promise.
//!
//! The verifier knows promises, not the courier's guarantee tiers: which
//! tier makes which promise is the courier's business (`courier-core`), and
//! any provider's operator can judge a log against a promise stated in
//! words.
//!
//! | promise | more than one effect | no effect, held as unknown | send with no lookup since the previous send |
//! |---|---|---|---|
//! | `exactly-once` | violation | violation | violation |
//! | `exactly-once-by-resend` | violation | counted (held past the key's window) | counted, by design |
//! | `at-most-once` | violation | counted | violation |
//! | `at-least-once` | counted, with the extra effects | counted | counted, by design |
//!
//! Under every promise an action with no effect that the courier does not
//! hold as unknown (and did not see refused, cancel or end expired) is a
//! violation, and so are the intent rows (refused, cancelled, time windows),
//! effects for unknown keys and gaps in the log's `seq`.
//!
//! # Invariants
//! - Each promise's rules are the three methods below and nothing else, so
//!   the table above is the whole difference between promises.
//! - `at-most-once` counts a send with no lookup since the previous send as
//!   a violation: the policy that makes it (hold) never sends an action again
//!   after an unknown outcome, and a provider without a lookup leaves no line
//!   between the two sends, so each such line is a resend the policy forbids,
//!   caught here even before it happens to make a second effect.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The promise a log is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Promise {
    /// Exactly one effect per action, every resend after a lookup.
    #[default]
    ExactlyOnce,
    /// Exactly one effect per action, through the provider's deduplication
    /// by key: after an unknown outcome the courier sends again with the
    /// same key and no lookup, by design, inside the key's window; past it,
    /// it holds the action as unknown (no effect or one).
    ExactlyOnceByResend,
    /// At most one effect per action: after an unknown outcome the courier
    /// holds the action as unknown, for an operator, and never sends it
    /// again. A held action may have no effect or one.
    AtMostOnce,
    /// At least one effect per action: after an unknown outcome the courier
    /// sends again, so duplicates are allowed (and counted).
    AtLeastOnce,
}

impl Promise {
    /// Every promise, in the order of the table of this module.
    pub const ALL: [Promise; 4] = [
        Promise::ExactlyOnce,
        Promise::ExactlyOnceByResend,
        Promise::AtMostOnce,
        Promise::AtLeastOnce,
    ];

    /// The promise's name, as `--promise` takes it and the report prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Promise::ExactlyOnce => "exactly-once",
            Promise::ExactlyOnceByResend => "exactly-once-by-resend",
            Promise::AtMostOnce => "at-most-once",
            Promise::AtLeastOnce => "at-least-once",
        }
    }

    /// One line on what the promise checks, for the report.
    pub fn summary(self) -> &'static str {
        match self {
            Promise::ExactlyOnce => "exactly one effect per action, every resend after a lookup",
            Promise::ExactlyOnceByResend => {
                "exactly one effect per action inside the key's window; resends with no lookup are by \
                 design, an action held past the window may have none"
            }
            Promise::AtMostOnce => {
                "at most one effect per action; an action with none is one the courier holds as \
                 unknown"
            }
            Promise::AtLeastOnce => {
                "at least one effect per action; duplicates and resends with no lookup are \
                 counted, not violations"
            }
        }
    }

    /// Whether an action may have more than one effect (then the extra
    /// effects are counted, not judged).
    pub fn allows_duplicates(self) -> bool {
        self == Promise::AtLeastOnce
    }

    /// Whether an action the courier holds as unknown may have no effect.
    /// Exactly-once by resend too: past the key's window (or the action's
    /// deadline) a resend would create, so the courier holds the action
    /// instead; exactly one effect is promised only inside the window.
    pub fn allows_unknown_without_effect(self) -> bool {
        matches!(
            self,
            Promise::ExactlyOnceByResend | Promise::AtMostOnce | Promise::AtLeastOnce
        )
    }

    /// Whether a `send` of a key with no `lookup` of that key since its
    /// previous `send` is by design (then it is counted, not judged).
    pub fn allows_resend_without_lookup(self) -> bool {
        matches!(self, Promise::ExactlyOnceByResend | Promise::AtLeastOnce)
    }
}

impl fmt::Display for Promise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`Promise::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown promise {0:?}: give exactly-once, exactly-once-by-resend, at-most-once or \
     at-least-once"
)]
pub struct UnknownPromise(pub String);

impl FromStr for Promise {
    type Err = UnknownPromise;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Promise::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPromise(s.to_string()))
    }
}
