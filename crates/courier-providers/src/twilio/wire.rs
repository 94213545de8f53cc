//! Twilio's wire format, pure: the send's form, its answer classified,
//! statuses mapped, and the JSON of a Message and of an error.

use super::API_VERSION;
use crate::inbound::percent_encode;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use courier_core::Status;
use courier_provider::wire::MessageView;
use courier_provider::SendOutcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Who a message is sent from: Twilio takes `From` (a number, a short code,
/// an alphanumeric sender) or `MessagingServiceSid` (a SID beginning `MG`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender {
    From(String),
    MessagingService(String),
}

impl Sender {
    /// `TWILIO_FROM` as Twilio takes it: a Messaging Service SID when it
    /// begins with `MG`, else a `From`.
    pub fn parse(setting: &str) -> Sender {
        if setting.starts_with("MG") {
            Sender::MessagingService(setting.to_string())
        } else {
            Sender::From(setting.to_string())
        }
    }

    /// The form field and its value.
    pub fn field(&self) -> (&'static str, &str) {
        match self {
            Sender::From(v) => ("From", v),
            Sender::MessagingService(v) => ("MessagingServiceSid", v),
        }
    }
}

/// The path of the Messages list of an account (the send's endpoint).
pub fn messages_path(account_sid: &str) -> String {
    format!(
        "/{API_VERSION}/Accounts/{}/Messages.json",
        percent_encode(account_sid)
    )
}

/// The status callback of one action: the base with the key in its query.
pub fn callback_url(callback_base: &str, key: &str) -> String {
    let sep = if callback_base.contains('?') {
        '&'
    } else {
        '?'
    };
    format!("{callback_base}{sep}key={}", percent_encode(key))
}

/// A send's form fields, in Twilio's names (OpenAPI request schema of
/// `POST .../Messages.json`): `To`, `From` or `MessagingServiceSid`, `Body`,
/// and `StatusCallback` when courier has a callback URL.
pub fn send_params(
    to: &str,
    body: &str,
    sender: &Sender,
    status_callback: Option<&str>,
) -> Vec<(&'static str, String)> {
    let (from_field, from) = sender.field();
    let mut params = vec![
        ("To", to.to_string()),
        (from_field, from.to_string()),
        ("Body", body.to_string()),
    ];
    if let Some(cb) = status_callback {
        params.push(("StatusCallback", cb.to_string()));
    }
    params
}

/// `application/x-www-form-urlencoded`, in the pairs' order, a space as
/// `+` (as Twilio's SDKs send it: the form of `send_request.txt`).
pub fn encode_form<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> String {
    // A `%20` from `percent_encode` is always a space: a literal `%` in the
    // input is encoded `%25`.
    let encode = |s: &str| percent_encode(s).replace("%20", "+");
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k.as_ref()), encode(v.as_ref())))
        .collect::<Vec<_>>()
        .join("&")
}

/// Every status of Twilio's `message_enum_status` and courier's reading of
/// it (`docs/providers.md`, "Statuses"); `None`: not a status of an
/// outbound message courier tracks.
///
/// - `accepted`, `scheduled`, `queued`, `sending`: Twilio has the message
///   and has not handed it to a carrier yet, so courier's `accepted`
///   (`sending` is Twilio's own hand-over in progress, not courier's
///   pre-send `sending`, which would rank below what the 201 said).
/// - `sent`: the carrier has it.
/// - `partially_delivered`: some segments arrived; not final at Twilio's
///   either, so `sent` and never a final courier would have to take back.
/// - `delivered`, `read`: the handset has it.
/// - `undelivered`, `failed`, `canceled`: Twilio gave up (a canceled
///   scheduled message is never sent), so the final `failed`.
/// - `receiving`, `received`: inbound messages.
pub const STATUSES: &[(&str, Option<Status>)] = &[
    ("accepted", Some(Status::Accepted)),
    ("scheduled", Some(Status::Accepted)),
    ("queued", Some(Status::Accepted)),
    ("sending", Some(Status::Accepted)),
    ("sent", Some(Status::Sent)),
    ("partially_delivered", Some(Status::Sent)),
    ("delivered", Some(Status::Delivered)),
    ("read", Some(Status::Delivered)),
    ("undelivered", Some(Status::Failed)),
    ("failed", Some(Status::Failed)),
    ("canceled", Some(Status::Failed)),
    ("receiving", None),
    ("received", None),
];

/// Twilio's message status on courier's order ([`STATUSES`]); a status not
/// in Twilio's published enum is not assumed to mean anything.
pub fn map_status(twilio: &str) -> Option<Status> {
    STATUSES
        .iter()
        .find(|(name, _)| *name == twilio)
        .and_then(|(_, status)| *status)
}

/// A Message resource as Twilio answers a create (OpenAPI `responses.201`,
/// `tests/fixtures/twilio/send_response_201.json`). Reading is lenient: only
/// `sid` and `status` are required; writing (the fake's double) gives every
/// documented field, `null` where unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Message {
    pub account_sid: Option<String>,
    pub api_version: Option<String>,
    pub body: Option<String>,
    pub date_created: Option<String>,
    pub date_sent: Option<String>,
    pub date_updated: Option<String>,
    pub direction: Option<String>,
    pub error_code: Option<i64>,
    pub error_message: Option<String>,
    pub from: Option<String>,
    pub messaging_service_sid: Option<String>,
    pub num_media: Option<String>,
    pub num_segments: Option<String>,
    pub price: Option<String>,
    pub price_unit: Option<String>,
    pub sid: String,
    pub status: String,
    pub subresource_uris: Option<BTreeMap<String, String>>,
    pub to: Option<String>,
    pub uri: Option<String>,
}

/// Twilio's error body (<https://www.twilio.com/docs/usage/twilios-response>:
/// `code`, `message`, `more_info`, `status`, sometimes `details`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApiError {
    pub code: u32,
    pub message: String,
    pub more_info: String,
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// An error with Twilio's link to the code's page.
    pub fn new(status: u16, code: u32, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            more_info: format!("https://www.twilio.com/docs/errors/{code}"),
            status,
            details: None,
        }
    }
}

/// Classifies the answer to a send (`docs/providers.md`, "Classifying the
/// answer"), by what the caller does next:
///
/// - `201` with a Message: the message exists (`Accepted`, with Twilio's SID
///   and its status mapped; a status courier does not map still means the
///   message exists, so `accepted`).
/// - `401`, `403`: credentials refused (`Rejected` with that status, which
///   the worker reads as not the action's fault).
/// - `429`: Twilio states a 429 "is never processed and is always safe to
///   retry", but courier's answers have no "nothing created, try later":
///   `Rejected` would fail the action for good, so it is `Unknown` (held at
///   tier `c`, sent again at `c-resend`), as the contract's client reads it.
/// - `409` (Twilio documents none for this operation): `Unknown`, as the
///   contract's client reads it.
/// - other `4xx` (e.g. `400` code 21211, an invalid `To`): Twilio refused
///   the request, nothing was created (`Rejected`).
/// - `5xx`, any other status, a `201` that cannot be read: `Unknown`.
///
/// `MessageView::updated_at` stays empty: Twilio's dates are RFC 2822, and
/// nothing courier does with a send's answer reads it.
pub fn classify_send(status: u16, body: &[u8], key: &str) -> SendOutcome {
    match status {
        201 => match serde_json::from_slice::<Message>(body) {
            Ok(m) if !m.sid.is_empty() => SendOutcome::Accepted(MessageView {
                status: map_status(&m.status).unwrap_or(Status::Accepted),
                id: m.sid,
                key: key.to_string(),
                updated_at: None,
            }),
            Ok(_) => SendOutcome::Unknown("a 201 answer without a message sid".to_string()),
            Err(e) => SendOutcome::Unknown(format!("unreadable 201 answer: {e}")),
        },
        // Twilio: "An API Request that receives an error 429 response is
        // never processed and is always safe to retry" (error 20429).
        429 => SendOutcome::NotCreated {
            status,
            error: error_text(body),
            retry_after_ms: None,
        },
        // 408: a proxy may answer it after forwarding the request.
        408 | 409 | 500..=599 => {
            SendOutcome::Unknown(format!("twilio answered {status}: {}", error_text(body)))
        }
        400..=499 => SendOutcome::Rejected {
            status,
            error: error_text(body),
        },
        other => SendOutcome::Unknown(format!("unexpected answer {other}: {}", error_text(body))),
    }
}

/// An error answer in a line: Twilio's code and message, or the start of
/// a body that is not Twilio's error JSON (a proxy's page).
pub fn error_text(body: &[u8]) -> String {
    match serde_json::from_slice::<ApiError>(body) {
        Ok(e) if e.code != 0 || !e.message.is_empty() => {
            format!("error {}: {}", e.code, e.message)
        }
        _ => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

/// The `Authorization` value of HTTP Basic auth (`AccountSid:AuthToken`).
pub fn basic_authorization(user: &str, password: &str) -> String {
    format!("Basic {}", BASE64.encode(format!("{user}:{password}")))
}

/// The user and password of an HTTP Basic `Authorization` value.
pub fn parse_basic_authorization(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = BASE64.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sender_is_a_messaging_service_only_by_its_mg_prefix() {
        assert_eq!(
            Sender::parse("+14155552345").field(),
            ("From", "+14155552345")
        );
        assert_eq!(
            Sender::parse("MGaaaa").field(),
            ("MessagingServiceSid", "MGaaaa")
        );
        assert_eq!(Sender::parse("Courier").field(), ("From", "Courier"));
    }

    #[test]
    fn the_callback_url_carries_the_key_in_its_query() {
        assert_eq!(
            callback_url("https://c.example/v1/webhooks/twilio", "courier-ab"),
            "https://c.example/v1/webhooks/twilio?key=courier-ab"
        );
        assert_eq!(
            callback_url("https://c.example/h?x=1", "a b"),
            "https://c.example/h?x=1&key=a%20b"
        );
    }

    #[test]
    fn a_form_encodes_a_space_as_plus_and_a_percent_as_itself() {
        let form = encode_form(&[("Body", "a b%20c+d"), ("To", "+1")]);
        assert_eq!(form, "Body=a+b%2520c%2Bd&To=%2B1");
        let back = crate::inbound::form_pairs(form.as_bytes());
        assert_eq!(back[0].1, "a b%20c+d");
    }

    #[test]
    fn basic_credentials_round_trip() {
        let v = basic_authorization("ACx", "tok:en");
        assert_eq!(v, "Basic QUN4OnRvazplbg==");
        assert_eq!(
            parse_basic_authorization(&v),
            Some(("ACx".to_string(), "tok:en".to_string()))
        );
        assert_eq!(parse_basic_authorization("Bearer QUN4OnRvazplbg=="), None);
        assert_eq!(parse_basic_authorization("Basic !!"), None);
    }
}
