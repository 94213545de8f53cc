//! Telnyx (Messaging API v2), run at tier `c` (`docs/providers.md`, "Telnyx").
//!
//! `POST /v2/messages` declares no idempotency key and the send body has no
//! client reference, and a message can be looked up only by Telnyx's own id:
//! after an unknown outcome nothing tells courier whether a message exists,
//! so the action is held (`courier_core::tier`). courier's key travels in
//! the message's `webhook_url` query (`?key=courier-…`); Telnyx echoes that
//! URL in every status webhook's signed body (`data.payload.webhook_url`),
//! so a webhook that verifies is evidence of the send of that key.
//!
//! The parts, the first three pure:
//! - `wire`: the send body ([`SendBody`], [`webhook_url`]), the answer
//!   classified by what the caller does next ([`classify_send`]), and
//!   Telnyx's message statuses on courier's order ([`map_status`]);
//! - `signature`: Ed25519 over `"{telnyx-timestamp}|{raw body}"`
//!   ([`verify`], [`sign`]), 300 s either way ([`TOLERANCE_S`]), and a key
//!   pair derived from a shared secret for the fake's double and tests
//!   ([`keypair_from_secret`]);
//! - `hooks`: [`Hooks`], the [`crate::Webhooks`] a server checks Telnyx's
//!   webhooks with, and [`read_event`], a verified event as a report;
//! - `client`: [`Client`], the [`courier_provider::Provider`] a worker runs.
//!
//! # Invariants
//! - The key of a report is read only from the signed body, never from the
//!   request line (which Telnyx does not sign).
//! - A `429`, a `5xx`, an unreadable `2xx` and a transport failure are
//!   [`courier_provider::SendOutcome::Unknown`]: Telnyx states nowhere that
//!   they created nothing.
//! - The API key and the signing key never print: [`Client`]'s and
//!   [`SigningKey`]'s `Debug` redact them, and nothing here logs.

mod client;
mod hooks;
mod signature;
mod wire;

pub use client::Client;
pub use hooks::{read_event, Hooks};
pub use signature::{
    keypair_from_secret, sign, verify, PublicKey, SigningKey, SIGNATURE_HEADER, TIMESTAMP_HEADER,
    TOLERANCE_S,
};
pub use wire::{classify_send, key_of_url, map_status, webhook_url, SendBody, KEY_PARAM};

/// The provider's name: of `--provider`, of the webhook route and of the
/// fake's dialect.
pub const NAME: &str = "telnyx";

/// The settings it reads (`Settings::load`): the API key (v2, bearer), the
/// sending number, and the account's Ed25519 public key (base64) that
/// webhooks are checked with. A messaging profile id is not needed when a
/// `from` number is given (`CreateMessageRequest`).
pub const SETTINGS: &[&str] = &["TELNYX_API_KEY", "TELNYX_FROM", "TELNYX_PUBLIC_KEY"];

/// Where Telnyx's API is (`https://api.telnyx.com/v2/messages`).
pub const BASE_URL: &str = "https://api.telnyx.com";
