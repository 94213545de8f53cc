//! The fake as a double of Telnyx (Messaging API v2): `POST /v2/messages`
//! and signed `message.sent` / `message.finalized` webhooks, as
//! `docs/providers.md` ("Telnyx") and `courier_providers::telnyx` read them.
//!
//! A send is checked in this order, the first failure answering in
//! Telnyx's error format (`{"errors": [{"code", "title", "detail"}]}`) and
//! logged `rejected` (without a key: the key is in the body, read after the
//! credentials): the log is usable (`503`), the bearer token (`401`), the
//! body's size (`413`) and JSON (`400`), courier's key in `webhook_url`'s
//! query (`422`; Telnyx itself needs no `webhook_url`, this double does:
//! the key is what its log is kept by), then the contract's checks of the
//! recipient, the text and the callback (`400`). The rest is the contract
//! fake's own send ([`send_flow`]), its answer translated: `201` becomes
//! Telnyx's `200 {"data": ...}`, an error keeps its status (`401`, `409`,
//! `422`, `429`, `503`, `504`) and its meaning, in Telnyx's body (a `429`,
//! from the fake's `--rate-limit`, is code `10011` and keeps its
//! `Retry-After`). Telnyx has no idempotency key, so the double runs with
//! `--ignore-key --no-lookup` (tier `c`) and a repeat is a new message.
//!
//! Error codes are those of Telnyx's error catalog
//! (https://developers.telnyx.com/development/api-fundamentals/api-errors):
//! `10009` authentication failed (the spec's `NotAuthorized` example says
//! `10006`; courier reads only the HTTP status), `10011` too many requests,
//! `10008` request timeout, `10007` unexpected error, `10004` missing
//! required parameter, `10015` bad request.
//!
//! Webhooks are signed with the Ed25519 key of
//! `courier_providers::telnyx::keypair_from_secret(webhook_secret)`, so a
//! courier server given that secret's public key accepts them. The
//! timestamp is the time the event's [`Outgoing`] is built: every attempt
//! of one delivery carries the same bytes, timestamp and signature, and a
//! later delivery of the same event (a duplicate, or after a restart) the
//! same body under a newer timestamp, so a different signature. Telnyx
//! signs each attempt at its own time; a delivery whose retries outlast the
//! 300 s tolerance would be refused as stale here, where Telnyx's would
//! not.

use super::{retry_after, with_retry_after, Outgoing};
use crate::http::{check_send, json, reject, send_flow};
use crate::state::WebhookJob;
use crate::{FakeConfig, Shared};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use courier_core::key::validate_key;
use courier_core::Status;
use courier_provider::wire::{ErrorBody, MessageView, SendRequest, WebhookEvent};
use courier_providers::telnyx::{
    key_of_url, keypair_from_secret, sign, SendBody, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// The longest a request body may take to arrive (as the contract's face).
const BODY_READ_MS_MAX: u64 = 10_000;
/// The largest contract answer translated (answers are a few hundred bytes).
const ANSWER_BYTES_MAX: usize = 64 * 1024;

pub(crate) fn routes(sh: Arc<Shared>) -> Router {
    Router::new()
        .route("/v2/messages", post(send))
        .with_state(sh)
}

async fn send(State(sh): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    if !authorized(&sh.cfg.api_key, &headers) {
        let text = "unauthorized: send Authorization: Bearer <api-key>";
        return refused(&sh, StatusCode::UNAUTHORIZED, "unauthorized", text).await;
    }
    let raw = match read_body(&sh, &headers, body).await {
        Ok(raw) => raw,
        Err(refusal) => return refusal,
    };
    let req: SendBody = match serde_json::from_slice(&raw) {
        Ok(req) => req,
        Err(e) => {
            let text =
                format!("body must be JSON {{\"from\", \"to\", \"text\", \"webhook_url\"}}: {e}");
            return refused(&sh, StatusCode::BAD_REQUEST, "bad_json", &text).await;
        }
    };
    let (key, url) = match courier_key(&req) {
        Ok(found) => found,
        Err((why, text)) => {
            return refused(&sh, StatusCode::UNPROCESSABLE_ENTITY, why, &text).await;
        }
    };
    let contract = SendRequest {
        to: req.to.clone(),
        body: req.text.clone(),
        status_callback: Some(url),
    };
    if let Err(refusal) = check_send(&sh, &key, &contract) {
        return telnyx_answer(refusal, None).await;
    }
    let answer = send_flow(sh.clone(), key, contract).await;
    telnyx_answer(answer, Some(&req)).await
}

/// `Authorization: Bearer <api-key>`, the token compared in constant time.
fn authorized(api_key: &str, headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some((scheme, token)) = value.as_bytes().split_at_checked(7) else {
        return false;
    };
    scheme.eq_ignore_ascii_case(b"bearer ")
        && bool::from(token.trim_ascii().ct_eq(api_key.as_bytes()))
}

/// courier's key from the query of `webhook_url`, and that URL.
fn courier_key(req: &SendBody) -> Result<(String, String), (&'static str, String)> {
    let Some(url) = req.webhook_url.clone() else {
        return Err((
            "no_key",
            "webhook_url is required: courier's key travels in its query (?key=...)".into(),
        ));
    };
    let Some(key) = key_of_url(&url) else {
        return Err(("no_key", "webhook_url has no key=... in its query".into()));
    };
    validate_key(&key).map_err(|e| ("bad_key", format!("the key in webhook_url: {e}")))?;
    Ok((key, url))
}

/// Logs a refused send (no key) and answers it Telnyx's way.
async fn refused(sh: &Shared, status: StatusCode, why: &'static str, text: &str) -> Response {
    telnyx_answer(reject(sh, None, status, why, text), None).await
}

/// The body, at most `request_bytes_max` bytes (`413` beyond, from
/// `Content-Length` before a byte is read), in at most 10 s.
async fn read_body(sh: &Shared, headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let limit = sh.cfg.request_bytes_max;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(sh).await);
    }
    let read = axum::body::to_bytes(body, limit);
    match tokio::time::timeout(Duration::from_millis(BODY_READ_MS_MAX), read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_length_limit(&e) => Err(too_large(sh).await),
        Ok(Err(_)) | Err(_) => {
            let text = "cannot read the request body";
            Err(refused(sh, StatusCode::BAD_REQUEST, "unreadable", text).await)
        }
    }
}

async fn too_large(sh: &Shared) -> Response {
    let text = format!(
        "request body is larger than {} bytes",
        sh.cfg.request_bytes_max
    );
    refused(sh, StatusCode::PAYLOAD_TOO_LARGE, "too_large", &text).await
}

/// Whether reading stopped at the size limit (`http_body_util`'s
/// `LengthLimitError`, somewhere in the error's chain).
fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// The contract fake's answer, in Telnyx's words.
async fn telnyx_answer(contract: Response, req: Option<&SendBody>) -> Response {
    let status = contract.status();
    let retry_after = retry_after(contract.headers());
    let body = match axum::body::to_bytes(contract.into_body(), ANSWER_BYTES_MAX).await {
        Ok(b) => b,
        Err(_) => Bytes::new(),
    };
    let (status, body) = translate(status, &body, req);
    with_retry_after(json(status, body), retry_after)
}

/// A contract answer as Telnyx's: `201` with a message (given the request
/// it answers) becomes `200 {"data": OutboundMessagePayload}`; any other
/// answer keeps its status, its `{"error"}` text as the detail of Telnyx's
/// `{"errors": [...]}`.
fn translate(status: StatusCode, body: &[u8], req: Option<&SendBody>) -> (StatusCode, Bytes) {
    if status == StatusCode::CREATED {
        if let (Some(req), Ok(view)) = (req, serde_json::from_slice::<MessageView>(body)) {
            return (StatusCode::OK, to_bytes(&message(&view, req)));
        }
        let detail = "the message was created, but its answer could not be rendered";
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            error_json(StatusCode::INTERNAL_SERVER_ERROR, detail),
        );
    }
    let detail = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    (status, error_json(status, &detail))
}

/// Telnyx's code and title for an error status.
fn error_code(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        401 => ("10009", "Authentication failed"),
        422 => ("10004", "Missing required parameter"),
        429 => ("10011", "Too many requests"),
        504 => ("10008", "Request timeout"),
        500..=599 => ("10007", "Unexpected error"),
        _ => ("10015", "Bad Request"),
    }
}

fn error_json(status: StatusCode, detail: &str) -> Bytes {
    let (code, title) = error_code(status);
    to_bytes(&json!({"errors": [{"code": code, "title": title, "detail": detail}]}))
}

fn to_bytes(v: &serde_json::Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).expect("a JSON value always encodes"))
}

/// Telnyx's recipient status of a courier status.
fn telnyx_status(status: Status) -> &'static str {
    match status {
        Status::Sending | Status::Accepted => "queued",
        Status::Sent => "sent",
        Status::Delivered => "delivered",
        Status::Failed => "delivery_failed",
    }
}

/// The event that reports a status: `message.finalized` for a final one.
/// (The fake sends no event for a message's first status, `accepted`; were
/// it to, it would read as `message.sent` with `queued`.)
fn event_type(status: Status) -> &'static str {
    if status.is_final() {
        "message.finalized"
    } else {
        "message.sent"
    }
}

/// `OutboundMessagePayload` of a created message, with the fields of the
/// documented example that the double knows.
fn message(view: &MessageView, req: &SendBody) -> serde_json::Value {
    json!({"data": {
        "record_type": "message",
        "direction": "outbound",
        "id": view.id,
        "type": req.kind.as_deref().unwrap_or("SMS"),
        "from": {"phone_number": req.from},
        "to": [{"phone_number": req.to, "status": telnyx_status(view.status)}],
        "text": req.text,
        "webhook_url": req.webhook_url,
        "webhook_failover_url": null,
        "errors": [],
        "parts": 1,
        "received_at": view.updated_at,
        "sent_at": null,
        "completed_at": null,
        "valid_until": null,
        "cost": null,
    }})
}

/// A Telnyx status event of a contract event, posted to (and naming)
/// `url`, the message's `webhook_url`. Nothing in it depends on the attempt
/// (no `meta.attempt`): every delivery of an event has the same body.
fn event_body(url: &str, event: &WebhookEvent) -> Bytes {
    to_bytes(&json!({
        "data": {
            "event_type": event_type(event.status),
            "id": event.event_id,
            "occurred_at": event.occurred_at,
            "payload": {
                "record_type": "message",
                "direction": "outbound",
                "id": event.message_id,
                "type": "SMS",
                "to": [{"status": telnyx_status(event.status)}],
                "webhook_url": url,
                "errors": [],
            },
            "record_type": "event",
        },
        "meta": {"delivered_to": url},
    }))
}

/// One status event as Telnyx posts it, signed now.
pub(crate) fn outgoing(cfg: &FakeConfig, job: &WebhookJob) -> Outgoing {
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    signed(&cfg.webhook_secret, job, now_s)
}

/// The event of `job`, signed at `now_s` with the key of `secret`.
fn signed(secret: &str, job: &WebhookJob, now_s: i64) -> Outgoing {
    // The fake wrote this body itself; were it unreadable, the job's own
    // fields stand in for it.
    let event = serde_json::from_slice::<WebhookEvent>(&job.body).unwrap_or_else(|_| {
        debug_assert!(false, "a webhook job's body is a contract event");
        WebhookEvent {
            event_id: job.event_id.clone(),
            message_id: String::new(),
            key: job.key.to_string(),
            status: job.status,
            occurred_at: String::new(),
        }
    });
    let body = event_body(&job.url, &event);
    let (key, _) = keypair_from_secret(secret);
    Outgoing {
        url: job.url.to_string(),
        content_type: "application/json",
        headers: vec![
            (SIGNATURE_HEADER, sign(&key, now_s, &body)),
            (TIMESTAMP_HEADER, now_s.to_string()),
        ],
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_provider::SendOutcome;
    use courier_providers::telnyx::{classify_send, webhook_url, Hooks};
    use courier_providers::{Inbound, Parsed, Refusal, Report, Webhooks};

    const KEY: &str = "courier-0192f0c1a2b37c4d8e9f0a1b2c3d4e5f";

    fn request() -> SendBody {
        let url = webhook_url("http://127.0.0.1:9/v1/webhooks/telnyx", KEY);
        SendBody::new("+18445550001", "+18665550001", "hi", Some(url))
    }

    fn job(status: Status) -> WebhookJob {
        let url = webhook_url("http://127.0.0.1:9/v1/webhooks/telnyx", KEY);
        let event = WebhookEvent {
            event_id: format!("evt_000007_{status}"),
            message_id: "msg_000007".into(),
            key: KEY.into(),
            status,
            occurred_at: "2026-01-01T00:00:00.000Z".into(),
        };
        WebhookJob {
            url: Arc::from(url.as_str()),
            key: Arc::from(KEY),
            event_id: event.event_id.clone(),
            status,
            body: Bytes::from(serde_json::to_vec(&event).unwrap()),
            next_attempt: 1,
        }
    }

    fn receive(secret: &str, out: &Outgoing, now_s: i64) -> Result<Parsed, Refusal> {
        let hooks = Hooks::from_public_key(&keypair_from_secret(secret).1).unwrap();
        let headers: Vec<(String, String)> = out
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        hooks.receive(&Inbound {
            url: &out.url,
            headers: &headers,
            body: &out.body,
            now_s,
        })
    }

    #[test]
    fn a_created_message_reads_as_telnyxs_accepted_answer() {
        let view = MessageView {
            id: "msg_000007".into(),
            key: KEY.into(),
            status: Status::Accepted,
            updated_at: Some("2026-01-01T00:00:00.000Z".into()),
        };
        let (status, body) = translate(
            StatusCode::CREATED,
            &serde_json::to_vec(&view).unwrap(),
            Some(&request()),
        );
        assert_eq!(status, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["data"]["to"][0]["status"], "queued");
        assert_eq!(v["data"]["to"][0]["phone_number"], "+18665550001");
        assert_eq!(v["data"]["from"]["phone_number"], "+18445550001");
        assert_eq!(v["data"]["record_type"], "message");
        assert_eq!(classify_send(200, &body, KEY), SendOutcome::Accepted(view));
    }

    #[test]
    fn contract_errors_keep_their_meaning_in_telnyxs_format() {
        let cases = [
            (StatusCode::BAD_REQUEST, "10015"),
            (StatusCode::UNAUTHORIZED, "10009"),
            (StatusCode::UNPROCESSABLE_ENTITY, "10004"),
            (StatusCode::TOO_MANY_REQUESTS, "10011"),
            (StatusCode::SERVICE_UNAVAILABLE, "10007"),
            (StatusCode::GATEWAY_TIMEOUT, "10008"),
        ];
        for (status, code) in cases {
            let (got, body) = translate(status, br#"{"error":"why"}"#, Some(&request()));
            assert_eq!(got, status);
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["errors"][0]["code"], code, "{status}");
            assert_eq!(v["errors"][0]["detail"], "why");
            // What the adapter makes of it is what the contract's status meant.
            let out = classify_send(status.as_u16(), &body, KEY);
            match status.as_u16() {
                400 | 401 | 422 => assert!(
                    matches!(&out, SendOutcome::Rejected { status: s, error } if *s == status.as_u16() && error.contains("why")),
                    "{out:?}"
                ),
                _ => assert!(
                    matches!(out, SendOutcome::Unknown(_))
                        || matches!(out, SendOutcome::Throttled { status: 429, .. })
                            && status == 429,
                    "{status}: {out:?}"
                ),
            }
        }
    }

    #[test]
    fn the_key_is_read_from_webhook_url_or_the_send_refused() {
        assert_eq!(courier_key(&request()).unwrap().0, KEY);
        let mut req = request();
        req.webhook_url = None;
        assert_eq!(courier_key(&req).unwrap_err().0, "no_key");
        req.webhook_url = Some("http://127.0.0.1:9/hook".into());
        assert_eq!(courier_key(&req).unwrap_err().0, "no_key");
        req.webhook_url = Some("http://127.0.0.1:9/hook?key=a%0Ab".into());
        assert_eq!(courier_key(&req).unwrap_err().0, "bad_key");
    }

    #[test]
    fn events_are_signed_telnyxs_way_and_read_back_as_reports() {
        let now = 1_700_000_000;
        for (status, event_type, telnyx) in [
            (Status::Sent, "message.sent", "sent"),
            (Status::Delivered, "message.finalized", "delivered"),
            (Status::Failed, "message.finalized", "delivery_failed"),
        ] {
            let j = job(status);
            let out = signed("hook-secret", &j, now);
            assert_eq!(out.url, &*j.url);
            assert_eq!(out.content_type, "application/json");
            let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
            assert_eq!(v["data"]["event_type"], event_type);
            assert_eq!(v["data"]["payload"]["to"][0]["status"], telnyx);
            assert_eq!(v["data"]["payload"]["webhook_url"], &*j.url);
            assert_eq!(
                receive("hook-secret", &out, now + 10),
                Ok(Parsed::Report(Report {
                    key: KEY.into(),
                    status,
                    event_id: j.event_id.clone(),
                    message_id: "msg_000007".into(),
                }))
            );
            // Another secret's key does not verify it.
            assert_eq!(receive("other", &out, now), Err(Refusal::Forged));
        }
    }

    #[test]
    fn a_later_delivery_has_the_same_body_and_a_new_timestamp() {
        let j = job(Status::Delivered);
        let first = signed("s", &j, 1_000);
        let again = signed("s", &j, 1_000);
        let later = signed("s", &j, 1_200);
        assert_eq!(first, again);
        assert_eq!(first.body, later.body);
        assert_ne!(first.headers, later.headers);
        assert!(receive("s", &later, 1_200).is_ok());
        assert!(matches!(
            receive("s", &first, 1_301),
            Err(Refusal::Stale { age_s: 301 })
        ));
    }

    #[test]
    fn bearer_tokens_are_checked() {
        let mut h = HeaderMap::new();
        assert!(!authorized("k", &h));
        h.insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
        assert!(authorized("k", &h));
        h.insert(header::AUTHORIZATION, "bearer  k ".parse().unwrap());
        assert!(authorized("k", &h));
        h.insert(header::AUTHORIZATION, "Bearer kk".parse().unwrap());
        assert!(!authorized("k", &h));
        h.insert(header::AUTHORIZATION, "Basic k".parse().unwrap());
        assert!(!authorized("k", &h));
    }

    /// The double's routes alone, served on a loopback port, tier `c`
    /// (`--ignore-key --no-lookup`), no faults.
    async fn serve_double(dir: &std::path::Path) -> (String, Arc<Shared>) {
        let mut cfg = FakeConfig::new(dir.join("log.jsonl"), "api-key", "hook-secret");
        cfg.faults = crate::FaultRates::NONE;
        cfg.ignore_key = true;
        cfg.lookup = false;
        let provider = crate::FakeProvider::open(cfg).await.unwrap();
        let sh = provider.shared.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(std::future::IntoFuture::into_future(axum::serve(
            listener,
            routes(sh.clone()),
        )));
        (url, sh)
    }

    #[tokio::test]
    async fn the_adapters_client_sends_through_the_double() {
        use courier_provider::Provider;
        use courier_providers::settings::Settings;
        use courier_providers::telnyx::Client;
        let dir = tempfile::tempdir().unwrap();
        let (url, _sh) = serve_double(dir.path()).await;
        let settings = Settings::from_pairs([
            ("TELNYX_API_KEY", "api-key"),
            ("TELNYX_FROM", "+18445550001"),
        ]);
        let base = "http://127.0.0.1:9/v1/webhooks/telnyx";
        let timeout = Duration::from_secs(5);
        let client = Client::new(&settings, &url, Some(base), timeout).unwrap();
        let first = client.send(KEY, "+18665550001", "hi").await;
        let again = client.send(KEY, "+18665550001", "hi").await;
        let (SendOutcome::Accepted(a), SendOutcome::Accepted(b)) = (&first, &again) else {
            panic!("{first:?} {again:?}");
        };
        assert_eq!((a.key.as_str(), a.status), (KEY, Status::Accepted));
        // No deduplication at Telnyx: the same key again is a new message.
        assert_ne!(a.id, b.id);
        let wrong = Settings::from_pairs([("TELNYX_API_KEY", "nope"), ("TELNYX_FROM", "+1")]);
        let client = Client::new(&wrong, &url, Some(base), timeout).unwrap();
        let out = client.send(KEY, "+18665550001", "hi").await;
        assert!(
            matches!(&out, SendOutcome::Rejected { status: 401, error } if error.starts_with("10009")),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn refused_sends_answer_telnyxs_errors_and_are_logged() {
        let dir = tempfile::tempdir().unwrap();
        let (url, sh) = serve_double(dir.path()).await;
        let http = reqwest::Client::new();
        let post = |body: Vec<u8>| {
            http.post(format!("{url}/v2/messages"))
                .header("authorization", "Bearer api-key")
                .header("content-type", "application/json")
                .body(body)
        };
        let mut no_key = request();
        no_key.webhook_url = Some("http://127.0.0.1:9/v1/webhooks/telnyx".into());
        let mut bad_phone = request();
        bad_phone.to = "12".into();
        let cases = [
            (b"{not json".to_vec(), 400, "10015"),
            (serde_json::to_vec(&no_key).unwrap(), 422, "10004"),
            (serde_json::to_vec(&bad_phone).unwrap(), 400, "10015"),
            (vec![b' '; sh.cfg.request_bytes_max + 1], 413, "10015"),
        ];
        for (body, status, code) in cases {
            let before = sh.log_lines.load(std::sync::atomic::Ordering::Acquire);
            let resp = post(body).send().await.unwrap();
            assert_eq!(resp.status().as_u16(), status);
            let v: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(v["errors"][0]["code"], code, "{v}");
            let after = sh.log_lines.load(std::sync::atomic::Ordering::Acquire);
            assert_eq!(after, before + 1, "one rejected line per refusal");
        }
    }
}
