//! courier-provider: everything about the SMS provider contract
//! (`shared/spec/provider-api.md`, kept in `docs/provider-api.md`).
//!
//! - [`wire`]: the JSON shapes of requests, answers, webhooks and log lines.
//! - [`signature`]: HMAC-SHA256 webhook signatures.
//! - [`client`]: the courier's client, whose answers are classified by what the
//!   caller does next (accepted, replayed, rejected, unknown).
//! - [`fake`]: the flaky fake provider with its own append-only log.
//! - [`verify`]: the verifier that reads any contract-following provider's log.

pub mod client;
pub mod fake;
pub mod signature;
pub mod verify;
pub mod wire;

pub use client::{ClientConfig, LookupOutcome, ProviderClient, SendOutcome};
