//! Dialects: the fake as a double of a named provider (`--dialect`).
//!
//! A dialect speaks that provider's documented wire format (its endpoints,
//! fields, errors and signed status callbacks) over the same core as the
//! contract's face: a send that passes the dialect's own checks goes to
//! [`crate::http::send_flow`] with courier's key (where the provider's
//! request carries it: an idempotency header, a client reference, the
//! status callback's query), the contract's answer is translated into the
//! provider's, and each status event is rendered as the provider's callback
//! and signed with its scheme. So the faults, the log (the ground truth the
//! verifier reads, keyed by courier's keys) and the restart recovery are
//! the contract fake's own.
//!
//! # Invariants
//! - A dialect adds routes; the contract's stay (a double still answers
//!   `POST /v1/messages` for tests that need both).
//! - Every attempt of one event carries the same bytes and signature
//!   ([`Outgoing`] is built once per event).
//! - A translated send answer keeps the contract answer's `Retry-After`
//!   (set by the fake's rate limit).

mod infobip;
mod telnyx;
mod twilio;

pub use crate::config::Dialect;
use crate::state::WebhookJob;
use crate::{FakeConfig, Shared};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use axum::Router;
use courier_provider::signature;
use std::sync::Arc;

impl Dialect {
    /// The dialect's own routes (none for the contract's).
    pub(crate) fn routes(self, sh: Arc<Shared>) -> Router {
        match self {
            Dialect::Contract => Router::new(),
            Dialect::Twilio => twilio::routes(sh),
            Dialect::Telnyx => telnyx::routes(sh),
            Dialect::Infobip => infobip::routes(sh),
        }
    }

    /// One status event as the provider posts it.
    pub(crate) fn outgoing(self, cfg: &FakeConfig, job: &WebhookJob) -> Outgoing {
        match self {
            Dialect::Contract => Outgoing {
                url: job.url.to_string(),
                content_type: "application/json",
                body: job.body.clone(),
                headers: vec![(
                    signature::HEADER,
                    signature::sign(cfg.webhook_secret.as_bytes(), &job.body),
                )],
            },
            Dialect::Twilio => twilio::outgoing(cfg, job),
            Dialect::Telnyx => telnyx::outgoing(cfg, job),
            Dialect::Infobip => infobip::outgoing(cfg, job),
        }
    }
}

/// The `Retry-After` of a contract answer, to keep on its translation.
pub(crate) fn retry_after(contract: &HeaderMap) -> Option<HeaderValue> {
    contract.get(header::RETRY_AFTER).cloned()
}

/// `translated` with the contract answer's `Retry-After`, if it had one.
pub(crate) fn with_retry_after(mut translated: Response, value: Option<HeaderValue>) -> Response {
    if let Some(v) = value {
        translated.headers_mut().insert(header::RETRY_AFTER, v);
    }
    translated
}

/// A status callback, ready to post: every attempt sends these bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outgoing {
    pub url: String,
    pub content_type: &'static str,
    pub body: bytes::Bytes,
    pub headers: Vec<(&'static str, String)>,
}
