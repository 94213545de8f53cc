//! The Infobip double (`--dialect infobip`): SMS API v3's send and message
//! logs over the contract's flows, and Infobip's delivery reports.
//!
//! - `POST /sms/3/messages` (`Authorization: App <api-key>`): one message
//!   to one destination, whose `messageId` is courier's key (missing or
//!   invalid: `400`, logged `rejected`); `webhooks.delivery.url` is the
//!   status callback, `content.text` the body. The contract's answer is
//!   translated: a created message or a replay is `200` with the message in
//!   `PENDING_ACCEPTED`; a repeat the core refuses (`409` in progress, `422`
//!   a different body) is `200` with the message in
//!   `REJECTED_DUPLICATE_MESSAGE_ID`, the rejected-repeat shape courier's
//!   adapter assumes (`courier_providers::infobip`, module docs: the
//!   reference leaves it open); every other refusal or fault keeps its
//!   status with Infobip's error body (a `429`, from the fake's
//!   `--rate-limit`, is `TOO_MANY_REQUESTS` and keeps its `Retry-After`).
//! - `GET /sms/3/logs?messageId=`: the contract's lookup; found is
//!   `{"results": [entry]}`, not found `{"results": []}`, lookups off
//!   (`--no-lookup`) `501` with Infobip's error body.
//! - Delivery reports: `{"results": [...]}` posted to the delivery URL as
//!   it was sent (courier's key and token in its query), unsigned, as
//!   Infobip's are.
//!
//! The double runs in the fake's default mode (deduplicating, lookups on):
//! Infobip with idempotency enabled, courier's tier `a`.
//!
//! # Invariants
//! - Every request the double refuses is logged `rejected` and has no
//!   effect, exactly as the contract's face.
//! - A status rendered here maps back, through the adapter's
//!   `map_status`, onto the courier status it was rendered from.

use super::{retry_after, with_retry_after, Outgoing};
use crate::http::{check_send, json, lookup_flow, reject, send_flow};
use crate::state::WebhookJob;
use crate::{FakeConfig, Shared};
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use courier_core::key::validate_key;
use courier_core::Status;
use courier_provider::wire::{ErrorBody, MessageView, SendRequest, WebhookEvent};
use courier_providers::inbound::form_pairs;
use courier_providers::infobip::wire::{
    DeliveryError, DeliveryReport, DeliveryResult, ErrorResponse, LogEntry, LogsResponse, SendBody,
    SendResponse, SentMessage, StatusObject, DUPLICATE_STATUS, DUPLICATE_STATUS_ID, GROUP_REJECTED,
    GROUP_REJECTED_ID,
};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The largest contract answer translated (a message view or an error).
const ANSWER_BYTES_MAX: usize = 64 * 1024;
/// The longest a request body may take to arrive (as the contract's face).
const BODY_READ_MS_MAX: u64 = 10_000;

pub(crate) fn routes(sh: Arc<Shared>) -> Router {
    Router::new()
        .route("/sms/3/messages", post(send))
        .route("/sms/3/logs", get(logs))
        .with_state(sh)
}

/// One status event as Infobip's delivery report: the key is the
/// `messageId` (and the `callbackData` courier sent), the URL is the one
/// the send gave (courier's token in it), and nothing is signed.
pub(crate) fn outgoing(_cfg: &FakeConfig, job: &WebhookJob) -> Outgoing {
    let (key, status, done_at) = match serde_json::from_slice::<WebhookEvent>(&job.body) {
        Ok(e) => (e.key, e.status, Some(e.occurred_at)),
        // The queue only holds events it wrote; read the job's own fields
        // should one not parse.
        Err(_) => (job.key.to_string(), job.status, None),
    };
    Outgoing {
        url: job.url.to_string(),
        content_type: "application/json",
        body: to_bytes(&delivery_report(&key, status, done_at)),
        headers: Vec::new(),
    }
}

/// `Authorization: App <api-key>`, the key compared in constant time.
fn authorized(api_key: &str, headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some((scheme, token)) = value.as_bytes().split_at_checked(4) else {
        return false;
    };
    scheme.eq_ignore_ascii_case(b"app ") && token.trim_ascii().ct_eq(api_key.as_bytes()).into()
}

async fn send(State(sh): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    if !authorized(&sh.cfg.api_key, &headers) {
        let refused = reject(
            &sh,
            None,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Invalid login details",
        );
        return translate(refused, None).await;
    }
    let raw = match read_body(&sh, &headers, body).await {
        Ok(raw) => raw,
        Err(refused) => return translate(refused, None).await,
    };
    let (key, req) = match contract_request(&raw) {
        Ok(parsed) => parsed,
        Err(bad) => {
            let refused = reject(
                &sh,
                bad.key.as_deref(),
                StatusCode::BAD_REQUEST,
                bad.why,
                &bad.text,
            );
            return translate(refused, None).await;
        }
    };
    if let Err(refused) = check_send(&sh, &key, &req) {
        return translate(refused, None).await;
    }
    let to = req.to.clone();
    let answer = send_flow(sh, key.clone(), req).await;
    translate(answer, Some((&key, &to))).await
}

/// The body, at most `request_bytes_max` bytes; a refusal is logged.
// The refusal is the HTTP answer itself, returned as it is.
#[allow(clippy::result_large_err)]
async fn read_body(sh: &Shared, headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let limit = sh.cfg.request_bytes_max;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        let text = format!("request body is larger than {limit} bytes");
        reject(sh, None, StatusCode::PAYLOAD_TOO_LARGE, "too_large", &text)
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let read = axum::body::to_bytes(body, limit);
    match tokio::time::timeout(Duration::from_millis(BODY_READ_MS_MAX), read).await {
        Ok(Ok(raw)) => Ok(raw),
        Ok(Err(e)) if is_length_limit(&e) => Err(too_large()),
        Ok(Err(e)) => {
            let text = format!("cannot read the request body: {e}");
            Err(reject(
                sh,
                None,
                StatusCode::BAD_REQUEST,
                "unreadable",
                &text,
            ))
        }
        Err(_) => Err(reject(
            sh,
            None,
            StatusCode::BAD_REQUEST,
            "unreadable",
            "the body took too long",
        )),
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| {
        s.downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
    })
}

/// Why a send body is refused (`400`), with the key when it has one.
#[derive(Debug, PartialEq, Eq)]
struct BadRequest {
    key: Option<String>,
    why: &'static str,
    text: String,
}

/// A v3 send body as the contract's send: one message, one destination,
/// its `messageId` courier's key, `to` in international format (the `+`
/// added back), the delivery URL as the status callback.
fn contract_request(raw: &[u8]) -> Result<(String, SendRequest), BadRequest> {
    let bad = |key: Option<&str>, why, text: &str| BadRequest {
        key: key.map(str::to_string),
        why,
        text: text.to_string(),
    };
    let body: SendBody = serde_json::from_slice(raw).map_err(|e| {
        let text = format!("body must be an SMS v3 request {{\"messages\": [...]}}: {e}");
        bad(None, "bad_json", &text)
    })?;
    let [message] = body.messages.as_slice() else {
        return Err(bad(
            None,
            "bad_shape",
            "the double takes exactly one message",
        ));
    };
    let [destination] = message.destinations.as_slice() else {
        let text = "the double takes exactly one destination per message";
        return Err(bad(None, "bad_shape", text));
    };
    let Some(key) = destination.message_id.as_deref() else {
        let text = "messages[0].destinations[0].messageId is required: courier's key";
        return Err(bad(None, "no_key", text));
    };
    if let Err(e) = validate_key(key) {
        let text = format!("bad messages[0].destinations[0].messageId: {e}");
        return Err(bad(None, "bad_key", &text));
    }
    let to = if destination.to.starts_with('+') {
        destination.to.clone()
    } else {
        format!("+{}", destination.to)
    };
    let status_callback = message
        .webhooks
        .as_ref()
        .and_then(|w| w.delivery.as_ref())
        .map(|d| d.url.clone());
    let req = SendRequest {
        to,
        body: message.content.text.clone(),
        status_callback,
    };
    Ok((key.to_string(), req))
}

async fn logs(
    State(sh): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if !authorized(&sh.cfg.api_key, &headers) {
        return infobip_error(StatusCode::UNAUTHORIZED, "Invalid login details");
    }
    let key = query.and_then(|q| {
        form_pairs(q.as_bytes())
            .into_iter()
            .find(|(k, _)| k == "messageId")
            .map(|(_, v)| v)
    });
    let Some(key) = key else {
        let text = "the double answers lookups by messageId only";
        return infobip_error(StatusCode::BAD_REQUEST, text);
    };
    if let Err(e) = validate_key(&key) {
        return infobip_error(StatusCode::BAD_REQUEST, &format!("bad messageId: {e}"));
    }
    let answer = lookup_flow(&sh, &key).await;
    let status = answer.status();
    let body = answer_body(answer).await;
    let (status, bytes) = logs_answer(status, &body);
    json(status, bytes)
}

/// Reads a contract answer's body (bounded: the contract's own answers).
async fn answer_body(answer: Response) -> Bytes {
    axum::body::to_bytes(answer.into_body(), ANSWER_BYTES_MAX)
        .await
        .unwrap_or_default()
}

/// A contract send answer (or refusal) in Infobip's words; `sent` is the
/// key and number of a send that reached the core.
async fn translate(answer: Response, sent: Option<(&str, &str)>) -> Response {
    let status = answer.status();
    let retry_after = retry_after(answer.headers());
    let body = answer_body(answer).await;
    let (status, bytes) = send_answer(status, &body, sent);
    with_retry_after(json(status, bytes), retry_after)
}

/// The translation of a send's answer: `201` (created or replayed) is `200`
/// `PENDING_ACCEPTED`, `409`/`422` the rejected repeat, anything else its
/// own status with Infobip's error body.
fn send_answer(status: StatusCode, body: &[u8], sent: Option<(&str, &str)>) -> (StatusCode, Bytes) {
    match (status, sent) {
        (StatusCode::CREATED, Some((key, to))) => match serde_json::from_slice::<MessageView>(body)
        {
            Ok(view) => {
                let answer = sent_answer(&view.id, key, to, pending_accepted());
                (StatusCode::OK, to_bytes(&answer))
            }
            Err(e) => error_answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unreadable answer: {e}"),
            ),
        },
        (StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY, Some((key, to))) => {
            let answer = sent_answer(key, key, to, rejected_duplicate());
            (StatusCode::OK, to_bytes(&answer))
        }
        _ => error_answer(status, &contract_error_text(body)),
    }
}

/// The translation of a lookup's answer.
fn logs_answer(status: StatusCode, body: &[u8]) -> (StatusCode, Bytes) {
    match status {
        StatusCode::OK => match serde_json::from_slice::<MessageView>(body) {
            Ok(view) => {
                let entry = LogEntry {
                    message_id: Some(view.key.clone()),
                    bulk_id: Some(bulk_id(&view.id)),
                    destination: None,
                    sent_at: None,
                    done_at: view.updated_at.clone(),
                    status: Some(status_object(view.status)),
                };
                let answer = LogsResponse {
                    results: vec![entry],
                };
                (StatusCode::OK, to_bytes(&answer))
            }
            Err(e) => error_answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unreadable answer: {e}"),
            ),
        },
        StatusCode::NOT_FOUND if contract_error_text(body) == "not_found" => {
            (StatusCode::OK, to_bytes(&LogsResponse { results: vec![] }))
        }
        other => error_answer(other, &contract_error_text(body)),
    }
}

fn sent_answer(bulk: &str, key: &str, to: &str, status: StatusObject) -> SendResponse {
    SendResponse {
        bulk_id: Some(bulk_id(bulk)),
        messages: vec![SentMessage {
            message_id: Some(key.to_string()),
            status: Some(status),
            destination: Some(to.trim_start_matches('+').to_string()),
        }],
    }
}

/// A bulk id derived from the contract's message id, so a replay answers
/// the same one.
fn bulk_id(message_id: &str) -> String {
    format!("bulk-{message_id}")
}

fn contract_error_text(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

fn infobip_error(status: StatusCode, text: &str) -> Response {
    let (status, bytes) = error_answer(status, text);
    json(status, bytes)
}

/// Infobip's error body for a status, the code named after it.
fn error_answer(status: StatusCode, text: &str) -> (StatusCode, Bytes) {
    let code = match status.as_u16() {
        400 => "BAD_REQUEST",
        401 => "UNAUTHORIZED",
        403 => "FORBIDDEN",
        404 => "NOT_FOUND",
        413 => "REQUEST_TOO_LARGE",
        429 => "TOO_MANY_REQUESTS",
        501 => "NOT_IMPLEMENTED",
        503 => "SERVICE_UNAVAILABLE",
        504 => "GATEWAY_TIMEOUT",
        _ => "GENERAL_ERROR",
    };
    (
        status,
        to_bytes(&ErrorResponse::service_exception(code, text)),
    )
}

fn status(group_id: u32, group: &str, id: u32, name: &str, description: &str) -> StatusObject {
    StatusObject {
        group_id: Some(group_id),
        group_name: group.to_string(),
        id: Some(id),
        name: name.to_string(),
        description: Some(description.to_string()),
    }
}

fn pending_accepted() -> StatusObject {
    status(
        1,
        "PENDING",
        26,
        "PENDING_ACCEPTED",
        "Message sent to next instance",
    )
}

fn rejected_duplicate() -> StatusObject {
    status(
        GROUP_REJECTED_ID,
        GROUP_REJECTED,
        DUPLICATE_STATUS_ID,
        DUPLICATE_STATUS,
        "Message rejected: duplicate message ID",
    )
}

/// A courier status as Infobip's (Infobip's ids and names, from its
/// status list).
fn status_object(s: Status) -> StatusObject {
    match s {
        Status::Sending | Status::Accepted => pending_accepted(),
        Status::Sent => status(
            3,
            "DELIVERED",
            2,
            "DELIVERED_TO_OPERATOR",
            "Message delivered to operator",
        ),
        Status::Delivered => status(
            3,
            "DELIVERED",
            5,
            "DELIVERED_TO_HANDSET",
            "Message delivered to handset",
        ),
        Status::Failed => status(
            2,
            "UNDELIVERABLE",
            9,
            "UNDELIVERABLE_NOT_DELIVERED",
            "Message sent not delivered",
        ),
    }
}

fn delivery_report(key: &str, s: Status, done_at: Option<String>) -> DeliveryReport {
    let error = (s != Status::Failed).then(|| DeliveryError {
        group_id: Some(0),
        group_name: Some("OK".to_string()),
        id: Some(0),
        name: Some("NO_ERROR".to_string()),
        description: Some("No Error".to_string()),
        permanent: Some(false),
    });
    DeliveryReport {
        results: vec![DeliveryResult {
            bulk_id: None,
            message_id: Some(key.to_string()),
            to: None,
            sender: None,
            sent_at: None,
            done_at,
            message_count: Some(1),
            status: Some(status_object(s)),
            error,
            callback_data: Some(key.to_string()),
        }],
    }
}

fn to_bytes(value: &impl serde::Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("Infobip's shapes always encode"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use courier_provider::{LookupOutcome, SendOutcome};
    use courier_providers::infobip::{self, classify_lookup, classify_send, map_status, Hooks};
    use courier_providers::settings::Settings;
    use courier_providers::{Inbound, Parsed, Refusal, Webhooks};

    const KEY: &str = "courier-0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    const SECRET: &str = "s3cret";

    fn view(status: Status) -> Vec<u8> {
        serde_json::to_vec(&MessageView {
            id: "msg_7".into(),
            key: KEY.into(),
            status,
            updated_at: Some("2026-01-01T00:00:00Z".into()),
        })
        .unwrap()
    }

    fn contract_error(text: &str) -> Vec<u8> {
        serde_json::to_vec(&ErrorBody { error: text.into() }).unwrap()
    }

    #[test]
    fn every_rendered_status_maps_back_onto_its_courier_status() {
        for s in [
            Status::Accepted,
            Status::Sent,
            Status::Delivered,
            Status::Failed,
        ] {
            let o = status_object(s);
            assert_eq!(map_status(&o.group_name, &o.name), Some(s), "{s:?}");
        }
        let o = status_object(Status::Sending);
        assert_eq!(map_status(&o.group_name, &o.name), Some(Status::Accepted));
        let dup = rejected_duplicate();
        assert_eq!(map_status(&dup.group_name, &dup.name), None);
    }

    #[test]
    fn the_adapters_body_reads_as_the_contracts_send() {
        let url = infobip::notify_url(
            "http://127.0.0.1:9/v1/webhooks/infobip",
            KEY,
            SECRET.as_bytes(),
        );
        let body = infobip::send_body("InfoSMS", KEY, "+41793026727", "Hello", Some(&url));
        let raw = serde_json::to_vec(&body).unwrap();
        let (key, req) = contract_request(&raw).unwrap();
        assert_eq!(key, KEY);
        assert_eq!(
            req,
            SendRequest {
                to: "+41793026727".into(),
                body: "Hello".into(),
                status_callback: Some(url),
            }
        );
    }

    #[test]
    fn a_body_without_one_keyed_destination_is_refused() {
        let refused = |v: serde_json::Value| {
            contract_request(&serde_json::to_vec(&v).unwrap())
                .unwrap_err()
                .why
        };
        let one = |dest: serde_json::Value| serde_json::json!({"messages": [{"destinations": [dest], "content": {"text": "x"}}]});
        assert_eq!(
            refused(one(serde_json::json!({"to": "41793026727"}))),
            "no_key"
        );
        assert_eq!(
            refused(one(
                serde_json::json!({"to": "41793026727", "messageId": ""})
            )),
            "bad_key"
        );
        assert_eq!(
            refused(
                serde_json::json!({"messages": [{"destinations": [{"to": "1", "messageId": "a"}, {"to": "2", "messageId": "b"}], "content": {"text": "x"}}]})
            ),
            "bad_shape"
        );
        assert_eq!(refused(serde_json::json!({"messages": []})), "bad_shape");
        assert_eq!(contract_request(b"nope").unwrap_err().why, "bad_json");
    }

    #[test]
    fn created_and_replayed_sends_read_as_accepted_by_the_adapter() {
        let (status, body) = send_answer(
            StatusCode::CREATED,
            &view(Status::Accepted),
            Some((KEY, "+41793026727")),
        );
        assert_eq!(status, StatusCode::OK);
        let out = classify_send(status.as_u16(), &body, KEY);
        assert!(
            matches!(&out, SendOutcome::Accepted(m) if m.id == KEY && m.status == Status::Accepted),
            "{out:?}"
        );
        let answer: SendResponse = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer.bulk_id.as_deref(), Some("bulk-msg_7"));
        assert_eq!(
            answer.messages[0].destination.as_deref(),
            Some("41793026727")
        );
    }

    #[test]
    fn a_refused_repeat_is_the_rejected_duplicate_the_adapter_looks_up() {
        for code in [StatusCode::CONFLICT, StatusCode::UNPROCESSABLE_ENTITY] {
            let (status, body) = send_answer(
                code,
                &contract_error("request_in_progress"),
                Some((KEY, "+41793026727")),
            );
            assert_eq!(status, StatusCode::OK);
            let answer: SendResponse = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                answer.messages[0].status.as_ref().unwrap().name,
                DUPLICATE_STATUS
            );
            assert!(matches!(
                classify_send(200, &body, KEY),
                SendOutcome::Unknown(_)
            ));
        }
    }

    #[test]
    fn errors_keep_their_status_and_meaning_in_infobips_body() {
        let cases = [
            (StatusCode::BAD_REQUEST, "bad_phone"),
            (StatusCode::UNAUTHORIZED, "Invalid login details"),
            (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            (StatusCode::GATEWAY_TIMEOUT, "timeout"),
            (StatusCode::TOO_MANY_REQUESTS, "slow down"),
        ];
        for (code, text) in cases {
            let (status, body) =
                send_answer(code, &contract_error(text), Some((KEY, "+41793026727")));
            assert_eq!(status, code);
            let e: ErrorResponse = serde_json::from_slice(&body).unwrap();
            assert!(e.summary().contains(text), "{}", e.summary());
            let out = classify_send(status.as_u16(), &body, KEY);
            match code.as_u16() {
                400 | 401 => assert!(matches!(out, SendOutcome::Rejected { .. }), "{out:?}"),
                _ => assert!(
                    matches!(
                        out,
                        SendOutcome::Unknown(_) | SendOutcome::Throttled { status: 429, .. }
                    ),
                    "{out:?}"
                ),
            }
        }
        // A refusal before the core (no key yet) is an error, never a 200.
        let (status, _) = send_answer(StatusCode::CREATED, &view(Status::Accepted), None);
        assert_eq!(status, StatusCode::CREATED);
    }

    #[test]
    fn lookups_read_as_found_not_found_or_unknown_by_the_adapter() {
        for s in [
            Status::Accepted,
            Status::Sent,
            Status::Delivered,
            Status::Failed,
        ] {
            let (status, body) = logs_answer(StatusCode::OK, &view(s));
            let out = classify_lookup(status.as_u16(), &body, KEY);
            assert!(
                matches!(&out, LookupOutcome::Found(m) if m.status == s && m.key == KEY),
                "{out:?}"
            );
        }
        let (status, body) = logs_answer(StatusCode::NOT_FOUND, &contract_error("not_found"));
        assert_eq!(
            classify_lookup(status.as_u16(), &body, KEY),
            LookupOutcome::NotFound
        );
        // Lookups off, or a 404 that is not the contract's: no answer.
        for (code, text) in [
            (StatusCode::NOT_IMPLEMENTED, "lookup_not_supported"),
            (StatusCode::NOT_FOUND, "no_such_route"),
            (StatusCode::SERVICE_UNAVAILABLE, "log_unavailable"),
        ] {
            let (status, body) = logs_answer(code, &contract_error(text));
            assert_eq!(status, code);
            assert!(matches!(
                classify_lookup(status.as_u16(), &body, KEY),
                LookupOutcome::Unknown(_)
            ));
        }
    }

    #[test]
    fn delivery_reports_are_unsigned_and_read_by_the_adapters_hooks() {
        let url = infobip::notify_url(
            "http://127.0.0.1:9/v1/webhooks/infobip",
            KEY,
            SECRET.as_bytes(),
        );
        let hooks =
            Hooks::new(&Settings::from_pairs([("INFOBIP_WEBHOOK_SECRET", SECRET)])).unwrap();
        for s in [Status::Sent, Status::Delivered, Status::Failed] {
            let event = WebhookEvent {
                event_id: "evt_1".into(),
                message_id: "msg_7".into(),
                key: KEY.into(),
                status: s,
                occurred_at: "2026-01-01T00:00:00Z".into(),
            };
            let job = WebhookJob {
                url: Arc::from(url.as_str()),
                key: Arc::from(KEY),
                event_id: "evt_1".into(),
                status: s,
                body: Bytes::from(serde_json::to_vec(&event).unwrap()),
                next_attempt: 1,
            };
            let cfg = FakeConfig::new("/nonexistent/log", "key-1", "contract-secret");
            let out = outgoing(&cfg, &job);
            assert_eq!(out.url, url);
            assert!(out.headers.is_empty());
            let parsed = hooks.receive(&Inbound {
                url: &out.url,
                headers: &[],
                body: &out.body,
                now_s: 0,
            });
            let Ok(Parsed::Report(r)) = parsed else {
                panic!("{parsed:?}")
            };
            assert_eq!((r.key.as_str(), r.status), (KEY, s));
            // Posted anywhere but the key's URL, it is refused.
            let elsewhere = hooks.receive(&Inbound {
                url: "http://127.0.0.1:9/v1/webhooks/infobip",
                headers: &[],
                body: &out.body,
                now_s: 0,
            });
            assert_eq!(elsewhere, Err(Refusal::Unsigned));
        }
    }

    #[test]
    fn only_the_app_scheme_with_the_api_key_is_authorized() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            authorized("key-1", &h)
        };
        assert!(with("App key-1"));
        assert!(with("app key-1"));
        assert!(!with("App key-2"));
        assert!(!with("Bearer key-1"));
        assert!(!with("App"));
        assert!(!authorized("key-1", &HeaderMap::new()));
    }

    /// A fake provider's shared state behind the double's routes, on a
    /// loopback port (no scheduler: no status changes, no webhooks).
    async fn serve_double(
        edit: impl FnOnce(&mut FakeConfig),
    ) -> (String, tempfile::TempDir, tokio::task::JoinHandle<()>) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = FakeConfig::new(dir.path().join("p.jsonl"), "key-1", "contract-secret");
        cfg.faults = crate::FaultRates::NONE;
        edit(&mut cfg);
        let provider = crate::FakeProvider::open(cfg).await.unwrap();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = routes(provider.shared.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (base, dir, server)
    }

    fn client(base: &str, api_key: &str) -> infobip::Client {
        let settings = Settings::from_pairs([
            ("INFOBIP_API_KEY", api_key),
            ("INFOBIP_FROM", "InfoSMS"),
            ("INFOBIP_WEBHOOK_SECRET", SECRET),
            ("INFOBIP_IDEMPOTENT", "on"),
            ("INFOBIP_IDEMPOTENCY_WINDOW_S", "3600"),
        ]);
        let callback = Some("http://127.0.0.1:9/v1/webhooks/infobip");
        infobip::Client::new(&settings, base, callback, std::time::Duration::from_secs(5)).unwrap()
    }

    #[tokio::test]
    async fn the_adapters_client_sends_and_looks_up_through_the_double() {
        use courier_provider::Provider;
        let (base, dir, server) = serve_double(|_| {}).await;
        let c = client(&base, "key-1");
        assert_eq!(c.lookup(KEY).await, LookupOutcome::NotFound);
        for _ in 0..2 {
            // The first send creates, the repeat is replayed: both accepted.
            let out = c.send(KEY, "+41793026727", "Hello").await;
            assert!(
                matches!(&out, SendOutcome::Accepted(m) if m.id == KEY && m.status == Status::Accepted),
                "{out:?}"
            );
        }
        let found = c.lookup(KEY).await;
        assert!(
            matches!(&found, LookupOutcome::Found(m) if m.key == KEY && m.status == Status::Accepted),
            "{found:?}"
        );
        // The same key with another text: the rejected repeat, looked up.
        let out = c.send(KEY, "+41793026727", "Other").await;
        assert!(matches!(out, SendOutcome::Unknown(_)), "{out:?}");
        // A refused number is a definite refusal; a wrong API key, credentials.
        let out = c.send("courier-other", "+0123", "Hello").await;
        assert!(
            matches!(out, SendOutcome::Rejected { status: 400, .. }),
            "{out:?}"
        );
        let out = client(&base, "key-2")
            .send("courier-third", "+41793026727", "x")
            .await;
        assert!(
            matches!(out, SendOutcome::Rejected { status: 401, .. }),
            "{out:?}"
        );
        server.abort();
        let log = std::fs::read_to_string(dir.path().join("p.jsonl")).unwrap();
        let created = log
            .lines()
            .filter(|l| l.contains(r#""result":"created""#))
            .count();
        assert_eq!(created, 1, "{log}");
        let rejected = log
            .lines()
            .filter(|l| l.contains(r#""result":"rejected""#))
            .count();
        assert_eq!(rejected, 2, "{log}");
    }

    #[tokio::test]
    async fn with_lookups_off_the_logs_answer_nothing_definite() {
        use courier_provider::Provider;
        let (base, _dir, server) = serve_double(|cfg| cfg.lookup = false).await;
        let out = client(&base, "key-1").lookup(KEY).await;
        assert!(
            matches!(&out, LookupOutcome::Unknown(why) if why.contains("501")),
            "{out:?}"
        );
        server.abort();
    }
}
