//! courier-providers: adapters for named SMS providers that do not follow
//! courier's own provider contract (`docs/provider-api.md`).
//!
//! Each provider is a module with three parts, the first two pure:
//! - its wire mapping: the send request, the answer classified by what the
//!   caller does next ([`courier_provider::SendOutcome`]), and its message
//!   statuses mapped onto courier's forward-only order;
//! - its webhooks: the provider's own signature scheme checked, and the
//!   callback mapped onto a [`Report`] (which action, which status);
//! - its client, a [`courier_provider::Provider`] a worker runs.
//!
//! Each provider's guarantee tier ([`Named::tier`]) is what its public
//! reference lets courier rely on (`docs/providers.md` cites every
//! capability); a capability that cannot be cited is not assumed.
//!
//! # Invariants
//! - A webhook that fails its provider's signature check, or is older than
//!   the scheme's tolerance, is refused ([`Refusal`]) before anything is
//!   parsed from it.
//! - Secrets ([`Secret`]) never print: their `Debug` is redacted.

pub mod any;
pub mod check;
pub mod inbound;
pub mod infobip;
pub mod named;
pub mod registry;
pub mod settings;
pub mod telnyx;
pub mod twilio;

pub use any::AnyProvider;
pub use inbound::{Inbound, Parsed, Refusal, Report, Webhooks};
pub use named::Named;
pub use registry::WebhookRegistry;
pub use settings::{Secret, Settings, SettingsError};
