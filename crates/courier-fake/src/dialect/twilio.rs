//! Twilio's double (`--dialect twilio`): the Messages create of the
//! `2010-04-01` API and its signed status callbacks, over the contract
//! fake's send flow (`docs/providers.md`, "Twilio").
//!
//! Run it as tier `c`, the fake's `--ignore-key --no-lookup` (`--tier c`):
//! Twilio deduplicates nothing and finds no message by courier's key, so in
//! the double every valid send is a new message and the key is only its
//! reference in the log; the contract's lookup route, which stays, answers
//! `501`.
//!
//! A send: HTTP Basic auth, the user the path's account SID (any SID) and
//! the password the fake's `--api-key`, standing for the auth token
//! (`401` code 20003); the form body (`To`, `From` or
//! `MessagingServiceSid`, `Body`, `StatusCallback`); courier's key from the
//! `StatusCallback` URL's query `key` (none: `400`, as a Twilio error,
//! logged refused with no key). Then the contract's checks and send flow,
//! whose answer is translated: its `201` into Twilio's Message JSON (the
//! fields of the documented `201` example, `sid` = `SM` + 32 hex derived
//! from the contract's id, status `queued`), its errors into Twilio's error
//! JSON with the same HTTP status (so `429`, `503` and the `504` of a held
//! time-out keep their meaning). The contract's text is the error's message,
//! except a `429` (the fake's `--rate-limit`), which is Twilio's error 20429
//! `Too Many Requests`, its `Retry-After` kept.
//!
//! A status event: Twilio's status callback form (`MessageSid`,
//! `MessageStatus`, `SmsSid`, `SmsStatus`, `ApiVersion`, `ErrorCode` when
//! failed), posted to the message's `StatusCallback` URL, key included,
//! and signed `X-Twilio-Signature` over that URL and the form with the
//! fake's `--api-key` as the auth token. `AccountSid`, `From` and `To`,
//! standard in Twilio's callbacks, are left out: the fake's webhook job
//! does not carry them, and courier reads neither.
//!
//! # Invariants
//! - A message's `sid` is a pure function of the contract's message id, so
//!   the send's answer and every callback of that message agree.
//! - Every refusal before the contract's flow is logged `rejected` (no
//!   effect), like the contract's own.

use crate::config::FakeConfig;
use crate::dialect::{retry_after, with_retry_after, Outgoing};
use crate::http::{check_send, json, reject, send_flow};
use crate::state::WebhookJob;
use crate::Shared;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use courier_core::key::validate_key;
use courier_core::Status;
use courier_provider::wire::{ErrorBody, MessageView, SendRequest, WebhookEvent};
use courier_providers::inbound::form_pairs;
use courier_providers::twilio::{self, ApiError, Message, Sender, API_VERSION};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The longest a send's body may take to arrive.
const BODY_READ_MS_MAX: u64 = 10_000;
/// The most of the contract's own answer read for its translation.
const ANSWER_BYTES_MAX: usize = 1024 * 1024;
/// The message of Twilio's error 20429.
const TOO_MANY_REQUESTS: &str = "Too Many Requests";

/// The Messages create route.
pub(crate) fn routes(sh: Arc<Shared>) -> Router {
    Router::new()
        .route("/2010-04-01/Accounts/{sid}/Messages.json", post(send))
        .with_state(sh)
}

/// One status event as Twilio's status callback, signed its way.
pub(crate) fn outgoing(cfg: &FakeConfig, job: &WebhookJob) -> Outgoing {
    // Signed over the URL as it is requested (reqwest sends the parsed
    // form), as Twilio signs the URL it calls.
    let url = reqwest::Url::parse(&job.url)
        .map(String::from)
        .unwrap_or_else(|_| job.url.to_string());
    let message_id = match serde_json::from_slice::<WebhookEvent>(&job.body) {
        Ok(event) => event.message_id,
        Err(e) => {
            // The state builds every body from a WebhookEvent; this is a bug,
            // and the event id still names the message uniquely.
            tracing::warn!(event = %job.event_id, "unreadable webhook event: {e}");
            job.event_id.clone()
        }
    };
    let params = callback_params(&message_id, job.status);
    let signature = twilio::sign(&cfg.api_key, &url, &params);
    Outgoing {
        url,
        content_type: "application/x-www-form-urlencoded",
        body: Bytes::from(twilio::encode_form(&params)),
        headers: vec![(twilio::HEADER, signature)],
    }
}

/// The status callback's form of one event of a message.
fn callback_params(message_id: &str, status: Status) -> Vec<(&'static str, String)> {
    let sid = message_sid(message_id);
    let status = twilio_status(status);
    let mut params = vec![
        ("ApiVersion", API_VERSION.to_string()),
        ("MessageSid", sid.clone()),
        ("MessageStatus", status.to_string()),
        ("SmsSid", sid),
        ("SmsStatus", status.to_string()),
    ];
    if status == "failed" {
        // Twilio's "Unknown error": a failed message's callback has a code.
        params.push(("ErrorCode", "30008".to_string()));
    }
    params
}

/// courier's status as Twilio's (each maps back through
/// [`twilio::map_status`] to itself): `accepted` is `queued`, the status
/// of a message Twilio has taken and not yet handed on (`sending`, which
/// the fake never reports, is said the same way).
fn twilio_status(status: Status) -> &'static str {
    match status {
        Status::Sending | Status::Accepted => "queued",
        Status::Sent => "sent",
        Status::Delivered => "delivered",
        Status::Failed => "failed",
    }
}

/// A Twilio message SID (`SM` + 32 hex) for a contract message id: the
/// message's number (`msg_000042` -> `SM000...02a`), so a SID reads back to
/// the log's message, or for any other id the first 16 bytes of its
/// SHA-256.
fn message_sid(message_id: &str) -> String {
    match message_id
        .strip_prefix("msg_")
        .and_then(|n| n.parse::<u64>().ok())
    {
        Some(n) => format!("SM{n:032x}"),
        None => format!(
            "SM{}",
            hex::encode(&Sha256::digest(message_id.as_bytes())[..16])
        ),
    }
}

/// A send's form, as the double reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SendForm {
    to: String,
    sender: Sender,
    body: String,
    status_callback: String,
}

/// A refusal of the double's own: the log's reason, Twilio's code and
/// message, always a `400` or `401` or `413`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refused {
    status: StatusCode,
    why: &'static str,
    code: u32,
    message: String,
}

impl Refused {
    fn bad(why: &'static str, code: u32, message: impl Into<String>) -> Refused {
        Refused {
            status: StatusCode::BAD_REQUEST,
            why,
            code,
            message: message.into(),
        }
    }
}

/// courier's key from a form's `StatusCallback` query, checked as the
/// contract checks a key (first: a refusal of the rest logs the key).
fn key_of(pairs: &[(String, String)]) -> Result<String, Refused> {
    let callback = field(pairs, "StatusCallback").ok_or_else(|| {
        Refused::bad(
            "no_key",
            21609,
            "the double needs a StatusCallback URL with courier's key (?key=...)",
        )
    })?;
    let key = callback
        .split_once('?')
        .and_then(|(_, query)| {
            form_pairs(query.as_bytes())
                .into_iter()
                .find(|(k, _)| k == "key")
        })
        .map(|(_, v)| v)
        .ok_or_else(|| {
            Refused::bad(
                "no_key",
                21609,
                "the StatusCallback URL carries no key (?key=...)",
            )
        })?;
    validate_key(&key).map_err(|e| {
        Refused::bad(
            "bad_key",
            21609,
            format!("the StatusCallback URL's key: {e}"),
        )
    })?;
    Ok(key)
}

/// The send's fields, Twilio's codes for what is missing.
fn parse_form(pairs: &[(String, String)]) -> Result<SendForm, Refused> {
    let to = field(pairs, "To")
        .ok_or_else(|| Refused::bad("no_to", 21604, "A 'To' phone number is required."))?;
    let sender = match (field(pairs, "From"), field(pairs, "MessagingServiceSid")) {
        (_, Some(mg)) => Sender::MessagingService(mg.to_string()),
        (Some(from), None) => Sender::From(from.to_string()),
        (None, None) => {
            return Err(Refused::bad(
                "no_from",
                21603,
                "A 'From' or 'MessagingServiceSid' parameter is required to send a message.",
            ))
        }
    };
    let body = field(pairs, "Body")
        .ok_or_else(|| Refused::bad("bad_body", 21602, "Message body is required."))?;
    let status_callback = field(pairs, "StatusCallback").unwrap_or_default();
    // Twilio: "a valid hostname and underscores are not allowed".
    if status_callback.contains('_') {
        return Err(Refused::bad(
            "bad_callback",
            21609,
            "Invalid StatusCallback URL: underscores are not allowed",
        ));
    }
    Ok(SendForm {
        to: to.to_string(),
        sender,
        body: body.to_string(),
        status_callback: status_callback.to_string(),
    })
}

/// A non-empty form field.
fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

async fn send(
    State(sh): State<Arc<Shared>>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let account = match path {
        Ok(Path(sid)) => sid,
        Err(e) => {
            let status = StatusCode::NOT_FOUND;
            return twilio_error(status, 20404, &format!("no such account: {e}"));
        }
    };
    if !authorized(&sh.cfg, &account, &headers) {
        let refused = Refused {
            status: StatusCode::UNAUTHORIZED,
            why: "unauthorized",
            code: 20003,
            message: "Authenticate: HTTP Basic, the account SID of the path and the auth token"
                .into(),
        };
        return refuse(&sh, None, refused);
    }
    let raw = match read_body(&sh, &headers, body).await {
        Ok(raw) => raw,
        Err(refused) => return refuse(&sh, None, refused),
    };
    let pairs = form_pairs(&raw);
    let key = match key_of(&pairs) {
        Ok(key) => key,
        Err(refused) => return refuse(&sh, None, refused),
    };
    let form = match parse_form(&pairs) {
        Ok(form) => form,
        Err(refused) => return refuse(&sh, Some(&key), refused),
    };
    let req = SendRequest {
        to: form.to.clone(),
        body: form.body.clone(),
        status_callback: Some(form.status_callback.clone()),
    };
    if let Err(refused) = check_send(&sh, &key, &req) {
        return translate(refused, &account, &form).await;
    }
    let answer = send_flow(sh.clone(), key, req).await;
    translate(answer, &account, &form).await
}

/// HTTP Basic with the path's account SID as the user and the fake's API
/// key as the password (compared in constant time).
fn authorized(cfg: &FakeConfig, account: &str, headers: &HeaderMap) -> bool {
    let Some((user, password)) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(twilio::parse_basic_authorization)
    else {
        return false;
    };
    let password_ok: bool = password.as_bytes().ct_eq(cfg.api_key.as_bytes()).into();
    password_ok && user == account
}

/// The body, at most `request_bytes_max` bytes (the contract's reader logs
/// its refusals with the key, which a Twilio send carries in its body).
async fn read_body(sh: &Shared, headers: &HeaderMap, body: Body) -> Result<Bytes, Refused> {
    use http_body_util::BodyExt;
    let limit = sh.cfg.request_bytes_max;
    let too_large = || Refused {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        why: "too_large",
        code: 20001,
        message: format!("request body is larger than {limit} bytes"),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let read = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout(Duration::from_millis(BODY_READ_MS_MAX), read).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(Refused::bad(
            "unreadable",
            20001,
            format!("cannot read the request body: {e}"),
        )),
        Err(_) => Err(Refused::bad(
            "unreadable",
            20001,
            "cannot read the request body: it took too long",
        )),
    }
}

/// Logs a refused send (no effect) and answers it as Twilio would.
fn refuse(sh: &Shared, key: Option<&str>, refused: Refused) -> Response {
    let logged = reject(sh, key, refused.status, refused.why, &refused.message);
    if logged.status() != refused.status {
        // The log is unusable: the contract's `503`.
        let status = logged.status();
        return twilio_error(status, code_for(status, ""), "log_unavailable");
    }
    twilio_error(refused.status, refused.code, &refused.message)
}

/// The contract's answer as Twilio's.
async fn translate(contract: Response, account: &str, form: &SendForm) -> Response {
    let status = contract.status();
    let retry_after = retry_after(contract.headers());
    let body = axum::body::to_bytes(contract.into_body(), ANSWER_BYTES_MAX)
        .await
        .unwrap_or_default();
    let now = chrono::Utc::now().to_rfc2822();
    let (status, out) = translate_answer(status, &body, account, form, &now);
    with_retry_after(json(status, out), retry_after)
}

/// Pure: the contract's status and body as Twilio's (module docs).
fn translate_answer(
    status: StatusCode,
    body: &[u8],
    account: &str,
    form: &SendForm,
    now: &str,
) -> (StatusCode, Bytes) {
    if status == StatusCode::CREATED {
        if let Ok(view) = serde_json::from_slice::<MessageView>(body) {
            let message = message_json(&view, account, form, now);
            return (status, to_bytes(&message));
        }
        let text = "the contract's answer is unreadable";
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        return (
            status,
            to_bytes(&ApiError::new(status.as_u16(), 20500, text)),
        );
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        // Twilio's error 20429 in Twilio's words (its only cause here is the
        // fake's rate limit).
        let error = ApiError::new(status.as_u16(), 20429, TOO_MANY_REQUESTS);
        return (status, to_bytes(&error));
    }
    let text = serde_json::from_slice::<ErrorBody>(body)
        .map(|e| e.error)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned());
    let error = ApiError::new(status.as_u16(), code_for(status, &text), text);
    (status, to_bytes(&error))
}

/// Twilio's error code for a contract error (the contract's own text kept
/// as the message).
fn code_for(status: StatusCode, text: &str) -> u32 {
    match status.as_u16() {
        400 if text.starts_with("'to'") => 21211,
        400 if text.starts_with("'body'") && text.ends_with("got 0") => 21602,
        400 if text.starts_with("'body'") => 21617,
        400 if text.contains("status_callback") => 21609,
        401 => 20003,
        404 => 20404,
        429 => 20429,
        503 => 20503,
        500..=599 => 20500,
        _ => 20001,
    }
}

/// The Message JSON of a created message: the documented `201`'s fields.
fn message_json(view: &MessageView, account: &str, form: &SendForm, now: &str) -> Message {
    let sid = message_sid(&view.id);
    let uri = format!("/{API_VERSION}/Accounts/{account}/Messages/{sid}");
    let (from, messaging_service_sid) = match &form.sender {
        Sender::From(from) => (Some(from.clone()), None),
        Sender::MessagingService(mg) => (None, Some(mg.clone())),
    };
    Message {
        account_sid: Some(account.to_string()),
        api_version: Some(API_VERSION.to_string()),
        body: Some(form.body.clone()),
        date_created: Some(now.to_string()),
        date_sent: None,
        date_updated: Some(now.to_string()),
        direction: Some("outbound-api".to_string()),
        error_code: None,
        error_message: None,
        from,
        messaging_service_sid,
        num_media: Some("0".to_string()),
        num_segments: Some("1".to_string()),
        price: None,
        price_unit: None,
        status: twilio_status(view.status).to_string(),
        subresource_uris: Some(BTreeMap::from([(
            "media".to_string(),
            format!("{uri}/Media.json"),
        )])),
        to: Some(form.to.clone()),
        uri: Some(format!("{uri}.json")),
        sid,
    }
}

fn twilio_error(status: StatusCode, code: u32, message: &str) -> Response {
    json(
        status,
        to_bytes(&ApiError::new(status.as_u16(), code, message)),
    )
}

fn to_bytes(value: &impl serde::Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("a Twilio answer always encodes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_provider::SendOutcome;
    use courier_providers::settings::Settings;
    use courier_providers::{Inbound, Parsed, Refusal, Report, Webhooks};

    const KEY: &str = "courier-0192f0c1a2b37c4d8e9f0a1b2c3d4e5f";
    const ACCOUNT: &str = "ACaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const NOW: &str = "Thu, 30 Jul 2015 20:12:31 +0000";

    fn pairs(form: &str) -> Vec<(String, String)> {
        form_pairs(form.as_bytes())
    }

    fn form() -> SendForm {
        SendForm {
            to: "+14155550100".into(),
            sender: Sender::From("+14155552345".into()),
            body: "hi".into(),
            status_callback: format!("http://127.0.0.1:9/v1/webhooks/twilio?key={KEY}"),
        }
    }

    #[test]
    fn a_sid_is_sm_and_32_hex_from_the_contracts_id() {
        assert_eq!(message_sid("msg_000042"), format!("SM{}2a", "0".repeat(30)));
        let other = message_sid("not-a-contract-id");
        assert_eq!(other.len(), 34);
        assert!(other.starts_with("SM"));
        assert!(other[2..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(other, message_sid("not-a-contract-id"));
        assert_ne!(message_sid("msg_000001"), message_sid("msg_000002"));
    }

    #[test]
    fn each_status_the_fake_reports_reads_back_as_itself() {
        for s in [
            Status::Accepted,
            Status::Sent,
            Status::Delivered,
            Status::Failed,
        ] {
            assert_eq!(twilio::map_status(twilio_status(s)), Some(s), "{s}");
        }
    }

    #[test]
    fn the_key_comes_from_the_status_callbacks_query() {
        let cb = twilio::encode_form(&[(
            "StatusCallback",
            format!("https://c.example/h?x=1&key={KEY}"),
        )]);
        assert_eq!(key_of(&pairs(&cb)), Ok(KEY.to_string()));
        for (form, why) in [
            ("To=%2B1&Body=x", "no_key"),
            ("StatusCallback=https%3A%2F%2Fc.example%2Fh", "no_key"),
            (
                "StatusCallback=https%3A%2F%2Fc.example%2Fh%3Fkey%3D",
                "bad_key",
            ),
            (
                "StatusCallback=https%3A%2F%2Fc.example%2Fh%3Fkey%3D%250A",
                "bad_key",
            ),
        ] {
            let got = key_of(&pairs(form)).unwrap_err();
            assert_eq!(
                (got.why, got.status),
                (why, StatusCode::BAD_REQUEST),
                "{form}"
            );
        }
    }

    #[test]
    fn a_form_is_read_with_twilios_codes_for_what_is_missing() {
        let f = form();
        let full = twilio::encode_form(&twilio::send_params(
            &f.to,
            &f.body,
            &f.sender,
            Some(&f.status_callback),
        ));
        assert_eq!(parse_form(&pairs(&full)), Ok(f.clone()));
        let mg = full.replace("From=", "MessagingServiceSid=");
        assert_eq!(
            parse_form(&pairs(&mg)).unwrap().sender,
            Sender::MessagingService("+14155552345".into())
        );
        for (drop, code) in [("To", 21604), ("From", 21603), ("Body", 21602)] {
            let kept: Vec<(String, String)> = pairs(&full)
                .into_iter()
                .filter(|(k, _)| k != drop)
                .collect();
            assert_eq!(parse_form(&kept).unwrap_err().code, code, "{drop}");
        }
        let underscore = full.replace("webhooks", "web_hooks");
        assert_eq!(parse_form(&pairs(&underscore)).unwrap_err().code, 21609);
    }

    #[test]
    fn a_created_message_answers_as_the_documented_201() {
        let view = MessageView {
            id: "msg_000007".into(),
            key: KEY.into(),
            status: Status::Accepted,
            updated_at: None,
        };
        let body = serde_json::to_vec(&view).unwrap();
        let (status, out) = translate_answer(StatusCode::CREATED, &body, ACCOUNT, &form(), NOW);
        assert_eq!(status, StatusCode::CREATED);
        let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let documented: serde_json::Value = serde_json::from_str(include_str!(
            "../../../courier-providers/tests/fixtures/twilio/send_response_201.json"
        ))
        .unwrap();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&got), keys(&documented));
        assert_eq!(got["status"], "queued");
        assert_eq!(got["to"], "+14155550100");
        assert_eq!(got["from"], "+14155552345");
        assert_eq!(got["messaging_service_sid"], serde_json::Value::Null);
        assert_eq!(got["date_created"], NOW);
        let sid = message_sid("msg_000007");
        assert_eq!(
            got["uri"],
            format!("/2010-04-01/Accounts/{ACCOUNT}/Messages/{sid}.json")
        );
        // And courier's Twilio client reads it as created, with that sid.
        assert_eq!(
            twilio::classify_send(201, &out, KEY),
            SendOutcome::Accepted(MessageView {
                id: sid,
                key: KEY.into(),
                status: Status::Accepted,
                updated_at: None,
            })
        );
    }

    #[test]
    fn contract_errors_keep_their_status_and_meaning() {
        // (status, the contract's text, Twilio's code and message)
        let cases = [
            (400, "'to': not a phone number", 21211, None),
            (
                400,
                "'body' must be 1..=1600 characters, got 0",
                21602,
                None,
            ),
            (429, "rate_limited", 20429, Some("Too Many Requests")),
            (503, "overloaded", 20503, None),
            (504, "timeout", 20500, None),
        ];
        for (status, text, code, message) in cases {
            let status = StatusCode::from_u16(status).unwrap();
            let body = serde_json::to_vec(&ErrorBody { error: text.into() }).unwrap();
            let (got, out) = translate_answer(status, &body, ACCOUNT, &form(), NOW);
            assert_eq!(got, status);
            let e: ApiError = serde_json::from_slice(&out).unwrap();
            assert_eq!(
                (e.status, e.code, e.message.as_str()),
                (status.as_u16(), code, message.unwrap_or(text))
            );
            let read = twilio::classify_send(status.as_u16(), &out, KEY);
            match status.as_u16() {
                400 => assert!(matches!(read, SendOutcome::Rejected { status: 400, .. })),
                // Twilio's 429 is "never processed" (the fake answers one
                // only under its own rate limit, before anything is made).
                429 => assert!(matches!(read, SendOutcome::NotCreated { status: 429, .. })),
                _ => assert!(
                    matches!(read, SendOutcome::Unknown(_)),
                    "{status}: {read:?}"
                ),
            }
        }
        // A 201 the double cannot read is a Twilio 500, never a success.
        let (got, _) = translate_answer(StatusCode::CREATED, b"{}", ACCOUNT, &form(), NOW);
        assert_eq!(got, StatusCode::INTERNAL_SERVER_ERROR);
    }

    fn job(status: Status) -> WebhookJob {
        let event = WebhookEvent {
            event_id: format!("evt_000007_{status}"),
            message_id: "msg_000007".into(),
            key: KEY.into(),
            status,
            occurred_at: "2026-01-01T00:00:00.000Z".into(),
        };
        WebhookJob {
            url: Arc::from(format!("http://127.0.0.1:9/v1/webhooks/twilio?key={KEY}")),
            key: Arc::from(KEY),
            event_id: event.event_id.clone(),
            status,
            body: Bytes::from(serde_json::to_vec(&event).unwrap()),
            next_attempt: 1,
        }
    }

    fn receive(out: &Outgoing, token: &str) -> Result<Parsed, Refusal> {
        let settings = Settings::from_pairs([("TWILIO_AUTH_TOKEN", token)]);
        let hooks = twilio::Hooks::new(&settings).unwrap();
        let headers: Vec<(String, String)> = out
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        hooks.receive(&Inbound {
            url: &out.url,
            headers: &headers,
            body: &out.body,
            now_s: 0,
        })
    }

    #[test]
    fn a_status_event_is_a_signed_callback_courier_reads_back() {
        let cfg = FakeConfig::new("p.jsonl", "the-auth-token", "secret");
        for status in [
            Status::Accepted,
            Status::Sent,
            Status::Delivered,
            Status::Failed,
        ] {
            let out = outgoing(&cfg, &job(status));
            assert_eq!(out.content_type, "application/x-www-form-urlencoded");
            assert_eq!(
                out.url,
                format!("http://127.0.0.1:9/v1/webhooks/twilio?key={KEY}")
            );
            let sid = message_sid("msg_000007");
            assert_eq!(
                receive(&out, "the-auth-token"),
                Ok(Parsed::Report(Report {
                    key: KEY.into(),
                    status,
                    event_id: format!("{sid}:{}", twilio_status(status)),
                    message_id: sid,
                })),
                "{status}"
            );
            assert_eq!(receive(&out, "another-token"), Err(Refusal::Forged));
            let has_error_code = form_pairs(&out.body).iter().any(|(k, _)| k == "ErrorCode");
            assert_eq!(has_error_code, status == Status::Failed, "{status}");
        }
        // Every attempt of one event carries the same bytes and signature.
        assert_eq!(
            outgoing(&cfg, &job(Status::Sent)),
            outgoing(&cfg, &job(Status::Sent))
        );
    }

    /// The double's route alone over a fresh tier-`c` fake (no scheduler:
    /// nothing is delivered), on a loopback port.
    async fn serve_double(dir: &std::path::Path) -> (String, std::path::PathBuf) {
        let log = dir.join("p.jsonl");
        let mut cfg = FakeConfig::new(&log, "the-auth-token", "secret");
        cfg.set_tier("c").unwrap();
        let provider = crate::FakeProvider::open(cfg).await.unwrap();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let router = routes(provider.shared.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        (base, log)
    }

    async fn post(
        base: &str,
        account: &str,
        auth: &str,
        form: String,
    ) -> (u16, Result<Message, ApiError>) {
        let resp = reqwest::Client::new()
            .post(format!("{base}{}", twilio::messages_path(account)))
            .header("authorization", auth)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        let read = if status == 201 {
            Ok(serde_json::from_slice(&bytes).unwrap())
        } else {
            Err(serde_json::from_slice(&bytes).unwrap())
        };
        (status, read)
    }

    #[tokio::test]
    async fn the_double_answers_a_send_as_twilio_and_logs_it_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let (base, log) = serve_double(dir.path()).await;
        let auth = twilio::basic_authorization(ACCOUNT, "the-auth-token");
        let f = form();
        let full = twilio::encode_form(&twilio::send_params(
            &f.to,
            &f.body,
            &f.sender,
            Some(&f.status_callback),
        ));

        let (status, read) = post(&base, ACCOUNT, &auth, full.clone()).await;
        assert_eq!(status, 201, "{read:?}");
        let m = read.unwrap();
        assert_eq!(
            (m.status.as_str(), m.to.as_deref()),
            ("queued", Some("+14155550100"))
        );
        assert_eq!(m.sid, message_sid("msg_000001"));
        assert_eq!(m.account_sid.as_deref(), Some(ACCOUNT));

        // Tier c: the same key again is a second message.
        let (status, read) = post(&base, ACCOUNT, &auth, full.clone()).await;
        assert_eq!(status, 201, "{read:?}");
        let m = read.unwrap();
        assert_eq!(m.sid, message_sid("msg_000002"));

        for (account, auth) in [
            (ACCOUNT, twilio::basic_authorization(ACCOUNT, "wrong")),
            ("ACbbbb", auth.clone()),
            (ACCOUNT, "Bearer the-auth-token".to_string()),
        ] {
            let (status, read) = post(&base, account, &auth, full.clone()).await;
            assert!(
                matches!(read, Err(ref e) if e.code == 20003 && status == 401),
                "{account} {auth}: {status} {read:?}"
            );
        }
        let no_key = full.replace(&format!("%3Fkey%3D{KEY}"), "");
        let (status, read) = post(&base, ACCOUNT, &auth, no_key).await;
        assert!(
            matches!(read, Err(ref e) if e.code == 21609 && status == 400),
            "{read:?}"
        );
        let bad_to = full.replace("To=%2B14155550100", "To=nope");
        let (status, read) = post(&base, ACCOUNT, &auth, bad_to).await;
        assert!(
            matches!(read, Err(ref e) if e.code == 21211 && status == 400),
            "{read:?}"
        );

        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let sends: Vec<(&str, Option<&str>)> = lines
            .iter()
            .filter(|l| l["op"] == "send")
            .map(|l| (l["result"].as_str().unwrap(), l["key"].as_str()))
            .collect();
        assert_eq!(
            sends,
            [
                ("created", Some(KEY)),
                ("created", Some(KEY)),
                ("rejected", None),
                ("rejected", None),
                ("rejected", None),
                ("rejected", None),
                ("rejected", Some(KEY)),
            ],
            "{text}"
        );
    }
}
