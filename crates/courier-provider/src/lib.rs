//! courier-provider: the SMS provider contract (`shared/spec/provider-api.md`,
//! kept in `docs/provider-api.md`), and nothing that implements a provider.
//! A worker links this crate and no server: the fake provider is
//! `courier-fake`, the log verifier `courier-verify`.
//!
//! - [`wire`]: the JSON shapes of requests, answers, webhooks and log lines.
//! - [`signature`]: HMAC-SHA256 webhook signatures.
//! - [`client`]: the courier's client, whose answers are classified by what the
//!   caller does next (accepted, replayed, rejected, unknown).
//! - [`Provider`]: what a worker needs of a provider (send and lookup); the
//!   client is the real one.

pub mod client;
mod provider;
pub mod signature;
pub mod wire;

pub use client::{
    retry_after_ms, ClientConfig, LookupOutcome, ProviderClient, SendOutcome, Throttle,
};
pub use provider::Provider;
