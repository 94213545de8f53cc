//! Twilio (Programmable Messaging, the `2010-04-01` Messages resource), run
//! at tier `c` (`docs/providers.md`, "Twilio").
//!
//! Why `c`: creating a Message takes no idempotency key and no client
//! reference, and no list filter finds a message by anything courier knows
//! before Twilio answers. So after an unknown outcome nothing is resent and
//! the action is held `unknown`; the client's lookup says so without asking
//! ([`Client`]), and a tier-`c` worker never calls it.
//!
//! Where courier's key travels: in the query of the `StatusCallback` URL
//! (`{callback_base}?key=courier-<32 hex>`, [`callback_url`]). Twilio signs
//! status callbacks over the full URL it calls, query included, so a
//! callback whose signature verifies ([`Hooks`]) is authenticated evidence
//! that the message of that key exists. Twilio refuses underscores in that
//! URL; courier's keys have none, and a callback base with one is refused
//! when the client is built.
//!
//! The parts, the first two pure:
//! - `wire`: the send's form fields, the answer classified
//!   ([`classify_send`]), Twilio's statuses onto courier's ([`map_status`]),
//!   the Message and error JSON (also what the fake's double renders), the
//!   HTTP Basic credentials;
//! - `signature`: `X-Twilio-Signature` ([`sign`], [`verify`]);
//! - `hooks`: [`Hooks`], the status callbacks verified and read;
//! - `client`: [`Client`], the [`courier_provider::Provider`] a worker runs.
//!
//! # Invariants
//! - A callback is refused (`Unsigned`, `Forged`) before any of its fields
//!   is believed; its key is read from the signed URL only.
//! - A send's answer is `Accepted` only from a readable `201`; a `429`, a
//!   `5xx`, a time-out or anything unreadable is `Unknown`, never "no".
//! - The auth token never prints: it is a [`crate::Secret`], and neither
//!   [`Client`]'s nor [`Hooks`]' `Debug` shows it.

mod client;
mod hooks;
mod signature;
mod wire;

pub use client::Client;
pub use hooks::Hooks;
pub use signature::{sign, verify, HEADER};
pub use wire::{
    basic_authorization, callback_url, classify_send, encode_form, error_text, map_status,
    messages_path, parse_basic_authorization, send_params, ApiError, Message, Sender, STATUSES,
};

/// The provider's name: `--provider`, the webhook route, the fake's dialect.
pub const NAME: &str = "twilio";

/// The settings the adapter reads (`crate::settings::Settings`):
/// the account, its auth token (HTTP Basic password and the callbacks'
/// signing key), and the sender: a phone number, or a Messaging Service
/// SID (`MG...`), which Twilio takes instead of `From`.
pub const SETTINGS: &[&str] = &["TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM"];

/// The API version in every path, and in the callbacks' `ApiVersion`.
pub const API_VERSION: &str = "2010-04-01";

/// Twilio's API host.
pub const BASE_URL: &str = "https://api.twilio.com";
