//! Telnyx's send request and its answer, and its message statuses.
//!
//! Sources (`docs/providers.md`, "Telnyx"): `CreateMessageRequest`,
//! `MessageResponse`, `OutboundMessagePayload` and the error examples of
//! `team-telnyx/openapi` `openapi/spec3.yml` at `0015e7f`.

use crate::inbound::{form_pairs, percent_encode};
use courier_core::Status;
use courier_provider::wire::MessageView;
use courier_provider::SendOutcome;
use serde::{Deserialize, Serialize};

/// The query parameter of `webhook_url` that carries courier's key.
pub const KEY_PARAM: &str = "key";

/// The body of `POST /v2/messages` (a subset of `CreateMessageRequest`).
/// Reading one ignores the fields Telnyx takes that courier never sends
/// (`messaging_profile_id`, `media_urls`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendBody {
    pub from: String,
    pub to: String,
    pub text: String,
    /// `"SMS"` (Telnyx's `type`: `SMS` or `MMS`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// courier's webhook URL with the key in its query ([`webhook_url`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// `false` beside a `webhook_url`: the messaging profile's own webhook
    /// URLs (which carry no key) are not tried as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_profile_webhooks: Option<bool>,
}

impl SendBody {
    /// An SMS, its status webhooks sent to `webhook_url` alone when given.
    pub fn new(from: &str, to: &str, text: &str, webhook_url: Option<String>) -> SendBody {
        SendBody {
            from: from.to_string(),
            to: to.to_string(),
            text: text.to_string(),
            kind: Some("SMS".to_string()),
            use_profile_webhooks: webhook_url.as_ref().map(|_| false),
            webhook_url,
        }
    }
}

/// courier's callback URL for one message: `callback_base` with
/// `key=<key>` added to its query.
pub fn webhook_url(callback_base: &str, key: &str) -> String {
    let sep = if callback_base.contains('?') {
        '&'
    } else {
        '?'
    };
    format!("{callback_base}{sep}{KEY_PARAM}={}", percent_encode(key))
}

/// The key in a URL made by [`webhook_url`] (`None`: no query, no `key`,
/// or an empty one).
pub fn key_of_url(url: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    form_pairs(query.as_bytes())
        .into_iter()
        .find(|(k, _)| k == KEY_PARAM)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// Telnyx's `to[].status` on courier's order (`docs/providers.md`, the
/// statuses table); `None` for a status courier does not track.
pub fn map_status(status: &str) -> Option<Status> {
    match status {
        "queued" | "sending" => Some(Status::Accepted),
        "sent" => Some(Status::Sent),
        // Telnyx's terminal "no receipt came": handed on, not known to be
        // delivered; not a courier final, so a later report can still end it.
        "delivery_unconfirmed" => Some(Status::Sent),
        "delivered" => Some(Status::Delivered),
        "sending_failed" | "delivery_failed" | "expired" => Some(Status::Failed),
        _ => None,
    }
}

/// `{"data": OutboundMessagePayload}`, the fields courier reads.
#[derive(Deserialize)]
struct Answer {
    data: Message,
}

#[derive(Deserialize)]
struct Message {
    id: String,
    #[serde(default)]
    to: Option<Vec<Recipient>>,
    #[serde(default)]
    received_at: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Recipient {
    #[serde(default)]
    pub status: Option<String>,
}

/// `{"errors": [{"code", "title", "detail", ...}]}`.
#[derive(Deserialize)]
struct Errors {
    errors: Vec<ErrorItem>,
}

#[derive(Deserialize)]
struct ErrorItem {
    #[serde(default)]
    code: Option<serde_json::Value>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    detail: Option<String>,
}

/// Classifies the answer to `POST /v2/messages` by what the caller does
/// next; `key` is courier's key of the send.
///
/// - `2xx` with a message id: accepted, at the status of `to[0]` (accepted
///   when it is missing or unknown: Telnyx has the message);
/// - `401`/`403`: credentials refused;
/// - `400`, `422` and other `4xx`: refused (nothing created is HTTP's
///   meaning; Telnyx does not state it);
/// - `408`, `409`, `429`, `5xx`, an unreadable `2xx`, anything else:
///   unknown. Telnyx states of none of them that nothing was created (a
///   `429` included, unlike Twilio), so at tier `c` they are held.
pub fn classify_send(status: u16, body: &[u8], key: &str) -> SendOutcome {
    match status {
        200..=299 => match serde_json::from_slice::<Answer>(body) {
            Ok(a) if !a.data.id.is_empty() => {
                let first = a.data.to.as_deref().and_then(|to| to.first());
                let mapped = first
                    .and_then(|r| r.status.as_deref())
                    .and_then(map_status)
                    .unwrap_or(Status::Accepted);
                SendOutcome::Accepted(MessageView {
                    id: a.data.id,
                    key: key.to_string(),
                    status: mapped,
                    updated_at: a.data.received_at,
                })
            }
            Ok(_) => SendOutcome::Unknown(format!("telnyx answered {status} without a message id")),
            Err(e) => SendOutcome::Unknown(format!("unreadable {status} answer: {e}")),
        },
        // Too many requests: unknown as well (Telnyx does not say a 429
        // created nothing), and a pause for every worker.
        429 => SendOutcome::Throttled {
            status,
            error: error_text(body),
            retry_after_ms: None,
        },
        408 | 409 | 500..=599 => {
            SendOutcome::Unknown(format!("telnyx answered {status}: {}", error_text(body)))
        }
        400..=499 => SendOutcome::Rejected {
            status,
            error: error_text(body),
        },
        other => SendOutcome::Unknown(format!("unexpected answer {other}")),
    }
}

/// An error body as one line (`10011 Too many requests: ...; ...`), or the
/// start of a body that is not Telnyx's error JSON.
fn error_text(body: &[u8]) -> String {
    match serde_json::from_slice::<Errors>(body) {
        Ok(e) if !e.errors.is_empty() => e
            .errors
            .iter()
            .map(|item| {
                let code = match &item.code {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let title = item.title.as_deref().unwrap_or_default();
                let head = format!("{code} {title}").trim().to_string();
                match item.detail.as_deref() {
                    Some(d) if head.is_empty() => d.to_string(),
                    Some(d) => format!("{head}: {d}"),
                    None => head,
                }
            })
            .collect::<Vec<_>>()
            .join("; "),
        _ => {
            let end = body.len().min(200);
            String::from_utf8_lossy(&body[..end]).into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_survives_the_url_and_a_base_query_is_kept() {
        let url = webhook_url("https://c.example/v1/webhooks/telnyx", "courier-a b");
        assert_eq!(
            url,
            "https://c.example/v1/webhooks/telnyx?key=courier-a%20b"
        );
        assert_eq!(key_of_url(&url).as_deref(), Some("courier-a b"));
        let url = webhook_url("https://c.example/hook?t=1", "courier-k");
        assert_eq!(url, "https://c.example/hook?t=1&key=courier-k");
        assert_eq!(key_of_url(&url).as_deref(), Some("courier-k"));
        assert_eq!(
            key_of_url("https://c.example/hook?key=k#frag").as_deref(),
            Some("k")
        );
        assert_eq!(key_of_url("https://c.example/hook"), None);
        assert_eq!(key_of_url("https://c.example/hook?key="), None);
    }

    #[test]
    fn error_text_reads_every_error_or_the_body() {
        let body = br#"{"errors":[{"code":"10011","title":"Too many","detail":"slow"},{"code":1,"detail":"d"}]}"#;
        assert_eq!(error_text(body), "10011 Too many: slow; 1: d");
        assert_eq!(error_text(b"<html>"), "<html>");
    }
}
