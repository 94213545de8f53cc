//! The courier's provider client.
//!
//! Answers are classified by what the caller does next. The rule that matters:
//! a time-out, a 5xx, a 429, a 409 or a refused or reset connection is
//! [`SendOutcome::Unknown`] (a 429: [`SendOutcome::Throttled`], unknown
//! too, with the provider's `Retry-After`), never "no" — the message may
//! exist.

use crate::wire::{ErrorBody, MessageView, SendRequest};
use courier_core::key::quote_key;
use courier_core::step::{LookupAnswer, SendAnswer};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URL, e.g. `http://127.0.0.1:7100`.
    pub base_url: String,
    pub api_key: String,
    /// Where the provider should send status webhooks for our messages.
    pub status_callback: Option<String>,
    /// Time-out of one request, connect included.
    pub timeout: Duration,
}

/// The answer to a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// First request with this key: the message now exists.
    Accepted(MessageView),
    /// A repeat: the provider replayed the first answer; no new message.
    Replayed(MessageView),
    /// A definite refusal: no message was created by this request.
    Rejected { status: u16, error: String },
    /// The provider states that this request created nothing and may be
    /// sent again later (a named provider's documented 429; never the
    /// contract's, whose 429 is [`SendOutcome::Throttled`]), after
    /// `retry_after_ms` when it said so.
    NotCreated {
        status: u16,
        error: String,
        retry_after_ms: Option<u64>,
    },
    /// "Too many requests" (the contract's 429): the outcome is unknown, as
    /// for [`SendOutcome::Unknown`] (look the key up before any resend),
    /// and the provider asks for no request before `retry_after_ms` (its
    /// `Retry-After`, when it sent one).
    Throttled {
        status: u16,
        error: String,
        retry_after_ms: Option<u64>,
    },
    /// Nothing is known: look the key up before doing anything else.
    Unknown(String),
}

impl SendOutcome {
    /// The pure-core view of this answer.
    pub fn answer(&self) -> SendAnswer {
        match self {
            SendOutcome::Accepted(m) | SendOutcome::Replayed(m) => SendAnswer::Accepted(m.status),
            SendOutcome::Rejected {
                status: status @ (401 | 403),
                error,
            } => SendAnswer::CredentialsRefused(format!("provider answered {status}: {error}")),
            SendOutcome::Rejected { status, error } => SendAnswer::Rejected {
                status: *status,
                reason: format!("provider answered {status}: {error}"),
            },
            SendOutcome::NotCreated { status, error, .. } => {
                SendAnswer::NotCreated(format!("provider answered {status}: {error}"))
            }
            SendOutcome::Throttled { .. } | SendOutcome::Unknown(_) => SendAnswer::Unknown,
        }
    }

    /// Whether the provider asked for fewer requests (a 429, in the
    /// contract's form or a named provider's), and when to come back.
    pub fn throttle(&self) -> Option<Throttle> {
        match self {
            SendOutcome::Throttled { retry_after_ms, .. }
            | SendOutcome::NotCreated {
                status: 429,
                retry_after_ms,
                ..
            } => Some(Throttle {
                retry_after_ms: *retry_after_ms,
            }),
            _ => None,
        }
    }

    /// The same answer with the provider's `Retry-After` (read from the
    /// answer's headers, [`retry_after_ms`]) on a 429; any other answer is
    /// returned as it is.
    pub fn with_retry_after(self, ms: Option<u64>) -> Self {
        match self {
            SendOutcome::Throttled { status, error, .. } => SendOutcome::Throttled {
                status,
                error,
                retry_after_ms: ms,
            },
            SendOutcome::NotCreated { status, error, .. } => SendOutcome::NotCreated {
                status,
                error,
                retry_after_ms: ms,
            },
            other => other,
        }
    }
}

/// A provider's "too many requests".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// Milliseconds to wait, from its `Retry-After`; None when it gave none.
    pub retry_after_ms: Option<u64>,
}

/// The `Retry-After` of an answer, in milliseconds from `now`: delta-seconds
/// or an HTTP date (RFC 9110 section 10.2.3); None when absent or unreadable
/// (the caller backs off on its own then). A date in the past is 0.
pub fn retry_after_ms(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<u64> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(s.saturating_mul(1_000));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(now)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}

/// The answer to a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    Found(MessageView),
    /// A definite 404 `{"error":"not_found"}`: a resend with the same key is allowed.
    NotFound,
    /// Anything else: ask again later.
    Unknown(String),
}

impl LookupOutcome {
    pub fn answer(&self) -> LookupAnswer {
        match self {
            LookupOutcome::Found(m) => LookupAnswer::Found(m.status),
            LookupOutcome::NotFound => LookupAnswer::NotFound,
            LookupOutcome::Unknown(_) => LookupAnswer::Unknown,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot build the provider client: {0}")]
pub struct ClientBuildError(String);

#[derive(Clone)]
pub struct ProviderClient {
    http: reqwest::Client,
    base_url: String,
    auth: String,
    status_callback: Option<String>,
}

impl ProviderClient {
    pub fn new(cfg: ClientConfig) -> Result<Self, ClientBuildError> {
        let http = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| ClientBuildError(e.to_string()))?;
        Ok(ProviderClient {
            http,
            base_url: cfg.base_url.trim_end_matches('/').to_string(),
            auth: format!("Bearer {}", cfg.api_key),
            status_callback: cfg.status_callback,
        })
    }

    /// Sends a message with the given idempotency key.
    pub async fn send(&self, key: &str, to: &str, body: &str) -> SendOutcome {
        let req = SendRequest {
            to: to.to_string(),
            body: body.to_string(),
            status_callback: self.status_callback.clone(),
        };
        let result = self
            .http
            .post(format!("{}/v1/messages", self.base_url))
            .header("authorization", &self.auth)
            .header("idempotency-key", quote_key(key))
            .json(&req)
            .send()
            .await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => return SendOutcome::Unknown(describe(&e)),
        };
        let status = resp.status().as_u16();
        let retry_after = retry_after_ms(resp.headers(), std::time::SystemTime::now());
        let replayed = resp
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return SendOutcome::Unknown(format!("answer {status} cut off: {}", describe(&e)))
            }
        };
        classify_send(status, replayed, &bytes).with_retry_after(retry_after)
    }

    /// Looks a key up.
    pub async fn lookup(&self, key: &str) -> LookupOutcome {
        let result = self
            .http
            .get(format!(
                "{}/v1/messages/{}",
                self.base_url,
                encode_path(key)
            ))
            .header("authorization", &self.auth)
            .send()
            .await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => return LookupOutcome::Unknown(describe(&e)),
        };
        let status = resp.status().as_u16();
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return LookupOutcome::Unknown(format!("answer {status} cut off: {}", describe(&e)))
            }
        };
        classify_lookup(status, &bytes)
    }
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("time-out: {e}")
    } else if e.is_connect() {
        format!("connection failed: {e}")
    } else {
        format!("transport error: {e}")
    }
}

/// Classifies a send answer. Public for tests of the classification itself.
pub fn classify_send(status: u16, replayed: bool, body: &[u8]) -> SendOutcome {
    match status {
        200 | 201 => match serde_json::from_slice::<MessageView>(body) {
            Ok(m) if replayed => SendOutcome::Replayed(m),
            Ok(m) => SendOutcome::Accepted(m),
            // A success we cannot read tells us nothing definite.
            Err(e) => SendOutcome::Unknown(format!("unreadable {status} answer: {e}")),
        },
        // Too many requests: unknown, and a pause (its Retry-After is added
        // by the caller, which has the headers).
        429 => SendOutcome::Throttled {
            status,
            error: error_text(body),
            retry_after_ms: None,
        },
        // In progress, server faults: the outcome is unknown.
        409 | 500..=599 => {
            SendOutcome::Unknown(format!("provider answered {status}: {}", error_text(body)))
        }
        400..=499 => SendOutcome::Rejected {
            status,
            error: error_text(body),
        },
        // 1xx, 3xx, other 2xx: nothing we can rely on.
        other => SendOutcome::Unknown(format!("unexpected answer {other}")),
    }
}

/// Classifies a lookup answer.
pub fn classify_lookup(status: u16, body: &[u8]) -> LookupOutcome {
    match status {
        200 => match serde_json::from_slice::<MessageView>(body) {
            Ok(m) => LookupOutcome::Found(m),
            Err(e) => LookupOutcome::Unknown(format!("unreadable 200 answer: {e}")),
        },
        // Only the contract's own 404 is a definite "not found"; a 404 from
        // something else (a wrong path, a proxy) is not evidence.
        404 if error_text(body) == "not_found" => LookupOutcome::NotFound,
        other => LookupOutcome::Unknown(format!("provider answered {other}: {}", error_text(body))),
    }
}

fn error_text(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

/// Percent-encodes a key for a path segment (keys are printable ASCII).
fn encode_path(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_is_unknown_and_carries_its_retry_after() {
        let out =
            classify_send(429, false, br#"{"error":"rate_limited"}"#).with_retry_after(Some(2_000));
        assert_eq!(out.answer(), SendAnswer::Unknown);
        assert_eq!(
            out.throttle(),
            Some(Throttle {
                retry_after_ms: Some(2_000)
            })
        );
        // Only a 429 is a throttle; a Retry-After on a 503 is not read.
        let busy = classify_send(503, false, b"{}").with_retry_after(Some(2_000));
        assert_eq!(busy.throttle(), None);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_445_412_480);
        let at = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_static(v));
            retry_after_ms(&h, now)
        };
        assert_eq!(at("3"), Some(3_000));
        assert_eq!(at(" 0 "), Some(0));
        // RFC 9110's example date, 10 s after `now`.
        assert_eq!(at("Wed, 21 Oct 2015 07:28:10 GMT"), Some(10_000));
        assert_eq!(at("Wed, 21 Oct 2015 07:27:00 GMT"), Some(0), "a date past");
        assert_eq!(at("soon"), None);
        assert_eq!(at("-1"), None);
        assert_eq!(retry_after_ms(&HeaderMap::new(), now), None);
    }
    use courier_core::Status;

    const MSG: &[u8] = br#"{"id":"msg_1","key":"k","status":"accepted"}"#;

    #[test]
    fn created_and_replayed_are_told_apart() {
        assert!(
            matches!(classify_send(201, false, MSG), SendOutcome::Accepted(m) if m.status == Status::Accepted)
        );
        assert!(matches!(
            classify_send(201, true, MSG),
            SendOutcome::Replayed(_)
        ));
    }

    #[test]
    fn unknown_is_never_no() {
        for code in [409, 429, 500, 502, 503, 504] {
            let out = classify_send(code, false, br#"{"error":"x"}"#);
            assert_eq!(out.answer(), SendAnswer::Unknown, "{code}");
            assert!(
                matches!(
                    out,
                    SendOutcome::Unknown(_) | SendOutcome::Throttled { status: 429, .. }
                ),
                "{code}"
            );
        }
        assert!(matches!(
            classify_send(201, false, b"not json"),
            SendOutcome::Unknown(_)
        ));
        assert!(matches!(
            classify_send(302, false, b""),
            SendOutcome::Unknown(_)
        ));
    }

    #[test]
    fn definite_refusals_are_rejections() {
        assert_eq!(
            classify_send(422, false, br#"{"error":"idempotency_key_reused"}"#),
            SendOutcome::Rejected {
                status: 422,
                error: "idempotency_key_reused".into()
            }
        );
        assert!(matches!(
            classify_send(400, false, b"{}"),
            SendOutcome::Rejected { status: 400, .. }
        ));
    }

    #[test]
    fn refused_credentials_are_not_the_actions_fault() {
        use courier_core::step::SendAnswer;
        for status in [401, 403] {
            let out = classify_send(status, false, br#"{"error":"unauthorized"}"#);
            assert_eq!(
                out.answer(),
                SendAnswer::CredentialsRefused(format!("provider answered {status}: unauthorized"))
            );
        }
        assert!(matches!(
            classify_send(400, false, b"{}").answer(),
            SendAnswer::Rejected { status: 400, .. }
        ));
    }

    #[test]
    fn only_the_contracts_404_is_not_found() {
        assert_eq!(
            classify_lookup(404, br#"{"error":"not_found"}"#),
            LookupOutcome::NotFound
        );
        assert!(matches!(
            classify_lookup(404, b"<html>"),
            LookupOutcome::Unknown(_)
        ));
        assert!(matches!(
            classify_lookup(503, b""),
            LookupOutcome::Unknown(_)
        ));
        assert!(matches!(classify_lookup(200, MSG), LookupOutcome::Found(_)));
    }

    #[test]
    fn keys_are_escaped_in_paths() {
        assert_eq!(encode_path("courier-abc_1.2~"), "courier-abc_1.2~");
        assert_eq!(encode_path("a b/c"), "a%20b%2Fc");
    }
}
