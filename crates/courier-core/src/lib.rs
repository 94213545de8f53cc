//! courier-core: the pure middle of courier.
//!
//! Everything here is a function of its inputs: no tokio, no SQL, no HTTP, no
//! clock and no global randomness. The runtime (`courier-dispatch`) performs
//! the side effects that these functions return as data.
//!
//! # Invariants
//! - A message status only moves forward (`status::merge`); a second, different
//!   final status is a conflict to be settled by a lookup, never by arrival order.
//! - The idempotency key of an action is a pure function of the action (`key`),
//!   so every owner of the action, at every epoch, sends with the same key.
//! - A send is preceded by a lookup whenever an earlier attempt may have left
//!   (`step::after_claim`, `step::after_lookup`, `step::after_send`), and no
//!   request leaves without a counted attempt and a passing local lease check
//!   (`step::before_request`, `lease`).

pub mod backoff;
pub mod key;
pub mod lease;
pub mod limits;
pub mod phone;
pub mod rate;
pub mod retention;
pub mod state;
pub mod status;
pub mod step;
pub mod tier;

pub use key::{action_key, validate_key, KeyError};
pub use limits::{Limits, LimitsError, BODY_CHARS_MAX, ENQUEUE_MANY_MAX};
pub use rate::{ProviderSettings, Rate, SettingsError, StoreSettings};
pub use retention::{Retention, RetentionError};
pub use state::ActionState;
pub use status::{merge, Merge, Status};
pub use tier::{Tier, UnknownPolicy};
