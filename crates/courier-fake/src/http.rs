//! The HTTP face of the fake: bearer auth, `POST /v1/messages` and
//! `GET /v1/messages/{key}`, answering exactly as the contract's tables say.
//!
//! A send is checked in this order, and the first failure answers: the log
//! is usable (`503`), the bearer token (`401`), the `Idempotency-Key` header
//! (`400`), the body size (`413`, refused from `Content-Length` before a
//! byte is read, or after `request_bytes_max` bytes), the JSON (`400`), the
//! phone number, text length and callback (`400`), then, with
//! `--rate-limit`, the fake's own rate limit (`429` with `Retry-After`,
//! answered at once, without the send's latency). Each refusal is logged
//! `rejected` and leaves no effect; a rate-limited one has the fault
//! `rate_limited`.
//!
//! The first request for a key claims it, waits out its latency, and then
//! creates the message (or faults). That part runs in a tracked task when
//! there is latency to wait, so a client that hangs up cannot leave the key
//! claimed forever: like a real provider, the fake finishes what it started.
//! In ignore-key mode every send goes that way, each one a send of its own.
//!
//! A lookup is checked for the bearer token (`401`) and the key (`400`);
//! with lookups off (`--no-lookup`) it is then answered
//! `501 {"error":"lookup_not_supported"}` at once and logged `faulted`.

use crate::bucket::Admission;
use crate::config::{check_callback, BODY_CHARS_MAX};
use crate::fate::{self, TimeoutFault};
use crate::state::{error_body, fingerprint, Begin, Claim, Creation, LOOKUP_NOT_SUPPORTED};
use crate::Shared;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use courier_core::key::{parse_key_header, validate_key};
use courier_core::phone::validate_phone;
use courier_provider::wire::SendRequest;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

pub(crate) fn router(sh: Arc<Shared>) -> Router {
    let dialect = sh.cfg.dialect.routes(sh.clone());
    Router::new()
        .route("/v1/messages", post(send))
        .route("/v1/messages/{key}", get(lookup))
        .with_state(sh)
        .merge(dialect)
        .fallback(no_route)
}

pub(crate) fn json(status: StatusCode, body: Bytes) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(crate) fn error(status: StatusCode, text: &str) -> Response {
    json(status, error_body(text))
}

pub(crate) fn log_unavailable() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "log_unavailable")
}

/// The error of a send over the rate limit, in its answer and its log
/// line's `fault`.
pub(crate) const RATE_LIMITED: &str = "rate_limited";

async fn no_route() -> Response {
    error(StatusCode::NOT_FOUND, "no_such_route")
}

/// Checks `Authorization: Bearer <api-key>`, comparing the token in constant
/// time (only its length can leak).
fn authorized(sh: &Shared, headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    let Some((scheme, token)) = value.split_at_checked(7) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    let token = token.trim_ascii();
    token.ct_eq(sh.cfg.api_key.as_bytes()).into()
}

/// Sleeps, or ends early (false) when the provider shuts down.
async fn wait(sh: &Shared, ms: u64) -> bool {
    if ms == 0 {
        return !sh.cancel.is_cancelled();
    }
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(ms)) => true,
        () = sh.cancel.cancelled() => false,
    }
}

fn shutting_down() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "shutting_down")
}

/// Logs a refused send and builds its answer.
pub(crate) fn reject(
    sh: &Shared,
    key: Option<&str>,
    status: StatusCode,
    why: &'static str,
    text: &str,
) -> Response {
    match sh.lock().log_rejected(key, why) {
        Ok(()) => error(status, text),
        Err(_) => log_unavailable(),
    }
}

/// The latency of a request: a send's (`message` given) drawn as its
/// configuration says, a lookup's from its key.
fn latency_for(sh: &Shared, key: &str, message: Option<&SendRequest>) -> u64 {
    if sh.cfg.latency.is_zero() {
        return 0;
    }
    let ordinal = sh.requests.fetch_add(1, Ordering::Relaxed);
    match message {
        Some(req) => fate::send_latency_ms(&sh.cfg, key, ordinal, &req.to, &req.body),
        None => fate::latency_ms(&sh.cfg, key, ordinal),
    }
}

async fn send(State(sh): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    match accept_request(&sh, &headers, body).await {
        Ok((key, req)) => send_flow(sh, key, req).await,
        Err(refused) => refused,
    }
}

/// A send that passed its checks, by key: the claim, the latency, the
/// effect (or a fault) and the contract's answer. A dialect's send
/// (`crate::dialect`) checks its own request, then comes here, and
/// translates the answer.
pub(crate) async fn send_flow(sh: Arc<Shared>, key: String, req: SendRequest) -> Response {
    if let Admission::Limited { retry_after_s } = sh.admit_send() {
        return rate_limited(&sh, &key, retry_after_s);
    }
    let fp = fingerprint(&req);
    let latency_ms = latency_for(&sh, &key, Some(&req));
    let callback: Option<Arc<str>> = req
        .status_callback
        .or_else(|| sh.cfg.default_callback.clone())
        .map(Arc::from);
    let begin = sh.lock().begin_send(&sh.cfg, &key, fp, Instant::now());
    let answer = match begin {
        Err(_) => return log_unavailable(),
        Ok(Begin::Claimed(claim)) => {
            let work = claimed_send(sh.clone(), key, callback, claim, latency_ms);
            return if latency_ms == 0 {
                // Nothing to wait for before the effect: it happens inline,
                // with no await between the claim and its end.
                work.await
            } else {
                match sh.tracker.spawn(work).await {
                    Ok(resp) => resp,
                    Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal_fault"),
                }
            };
        }
        Ok(Begin::Replay(answer)) => {
            let mut resp = json(StatusCode::CREATED, answer);
            resp.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            resp
        }
        Ok(Begin::Conflict) => error(StatusCode::CONFLICT, "request_in_progress"),
        Ok(Begin::Reused) => error(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
        Ok(Begin::Overloaded) => error(StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
    };
    if wait(&sh, latency_ms).await {
        answer
    } else {
        shutting_down()
    }
}

/// A send over the rate limit: logged `rejected` with the fault
/// `rate_limited` and answered `429 {"error":"rate_limited"}` with
/// `Retry-After`. It comes before the send's latency, its key's claim and
/// its fault draws, so nothing is created, the key is not remembered, and
/// no seeded draw is used up.
fn rate_limited(sh: &Shared, key: &str, retry_after_s: u64) -> Response {
    let status = StatusCode::TOO_MANY_REQUESTS;
    let mut resp = reject(sh, Some(key), status, RATE_LIMITED, RATE_LIMITED);
    if resp.status() == status {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
    }
    resp
}

/// Checks a send's credentials, key and body. A refusal is logged (no
/// effect) and is the answer.
async fn accept_request(
    sh: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<(String, SendRequest), Response> {
    let key = request_key(sh, headers)?;
    let raw = request_body(sh, headers, &key, body).await?;
    let req = parse_request(sh, &key, &raw)?;
    Ok((key, req))
}

/// The credentials first (a `401` logs the key if it is usable), then the key.
// The refusal is the HTTP answer itself, built once per refused request
// and returned as it is: boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
fn request_key(sh: &Shared, headers: &HeaderMap) -> Result<String, Response> {
    let key = headers
        .get("idempotency-key")
        .map(|v| parse_key_header(v.as_bytes()));
    let usable_key = key
        .as_ref()
        .and_then(|k| k.as_ref().ok())
        .map(String::as_str);
    if !authorized(sh, headers) {
        return Err(reject(
            sh,
            usable_key,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "unauthorized: send Authorization: Bearer <api-key>",
        ));
    }
    match key {
        None => Err(reject(
            sh,
            None,
            StatusCode::BAD_REQUEST,
            "no_key",
            "missing Idempotency-Key header",
        )),
        Some(Err(e)) => {
            let text = format!("bad Idempotency-Key header: {e}");
            Err(reject(sh, None, StatusCode::BAD_REQUEST, "bad_key", &text))
        }
        Some(Ok(k)) => Ok(k),
    }
}

/// The body, at most `request_bytes_max` bytes.
pub(crate) async fn request_body(
    sh: &Shared,
    headers: &HeaderMap,
    key: &str,
    body: Body,
) -> Result<Bytes, Response> {
    let limit = sh.cfg.request_bytes_max;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match read_body(body, limit, declared).await {
        Ok(b) => Ok(b),
        Err(BodyError::TooLarge) => {
            let text = format!("request body is larger than {limit} bytes");
            let status = StatusCode::PAYLOAD_TOO_LARGE;
            Err(reject(sh, Some(key), status, "too_large", &text))
        }
        Err(BodyError::Unreadable(e)) => {
            let text = format!("cannot read the request body: {e}");
            let status = StatusCode::BAD_REQUEST;
            Err(reject(sh, Some(key), status, "unreadable", &text))
        }
    }
}

/// The body as a send: JSON, a phone number, a body of allowed length, a
/// callback that is an HTTP URL.
// The refusal is the HTTP answer itself, built once per refused request
// and returned as it is: boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
fn parse_request(sh: &Shared, key: &str, raw: &[u8]) -> Result<SendRequest, Response> {
    let bad =
        |why: &'static str, text: &str| reject(sh, Some(key), StatusCode::BAD_REQUEST, why, text);
    let req: SendRequest = match serde_json::from_slice(raw) {
        Ok(r) => r,
        Err(e) => {
            let text = format!("body must be JSON {{\"to\", \"body\", \"status_callback\"?}}: {e}");
            return Err(bad("bad_json", &text));
        }
    };
    check_send(sh, key, &req)?;
    Ok(req)
}

/// A send's fields: a phone number, a body of allowed length, a callback
/// that is an HTTP URL (a dialect's send is checked the same way).
#[allow(clippy::result_large_err)]
pub(crate) fn check_send(sh: &Shared, key: &str, req: &SendRequest) -> Result<(), Response> {
    let bad =
        |why: &'static str, text: &str| reject(sh, Some(key), StatusCode::BAD_REQUEST, why, text);
    if let Err(e) = validate_phone(&req.to) {
        return Err(bad("bad_phone", &format!("'to': {e}")));
    }
    let chars = req.body.chars().count();
    if chars == 0 || chars > BODY_CHARS_MAX {
        let text = format!("'body' must be 1..={BODY_CHARS_MAX} characters, got {chars}");
        return Err(bad("bad_body", &text));
    }
    if let Some(cb) = &req.status_callback {
        if let Err(e) = check_callback(cb) {
            return Err(bad("bad_callback", &e));
        }
    }
    Ok(())
}

/// The most of an oversized body that is read and thrown away before the
/// `413`, so a client still writing its body reads the answer instead of a
/// broken pipe. Beyond it the connection is simply closed.
const DRAIN_BYTES_MAX: u64 = 8 * 1024 * 1024;
/// The longest a request body may take to arrive.
const BODY_READ_MS_MAX: u64 = 10_000;

enum BodyError {
    TooLarge,
    Unreadable(String),
}

/// Reads a body of at most `limit` bytes. An oversized one is known from its
/// `Content-Length` before a byte is kept, or as soon as it passes the limit;
/// its rest is drained (bounded) and never buffered.
async fn read_body(body: Body, limit: usize, declared: Option<u64>) -> Result<Bytes, BodyError> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut kept = bytes::BytesMut::new();
    let mut too_large = declared.is_some_and(|n| n > limit as u64);
    let mut drained: u64 = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(BODY_READ_MS_MAX);
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(e))) if too_large => {
                tracing::debug!("oversized body cut off: {e}");
                return Err(BodyError::TooLarge);
            }
            Ok(Some(Err(e))) => return Err(BodyError::Unreadable(e.to_string())),
            Ok(None) => break,
            Err(_) if too_large => return Err(BodyError::TooLarge),
            Err(_) => return Err(BodyError::Unreadable("the body took too long".into())),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if too_large {
            drained += data.len() as u64;
            if drained > DRAIN_BYTES_MAX {
                return Err(BodyError::TooLarge);
            }
        } else if kept.len() + data.len() > limit {
            too_large = true;
            drained = (kept.len() + data.len()) as u64;
            kept = bytes::BytesMut::new();
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if too_large {
        Err(BodyError::TooLarge)
    } else {
        Ok(kept.freeze())
    }
}

/// A claimed send (the first request for a key; in ignore-key mode, any
/// send): latency, then the effect (or a fault), then the answer.
async fn claimed_send(
    sh: Arc<Shared>,
    key: String,
    callback: Option<Arc<str>>,
    claim: Claim,
    latency_ms: u64,
) -> Response {
    if !wait(&sh, latency_ms).await {
        // Shutting down before the effect: nothing is created.
        return match sh
            .lock()
            .finish_faulted(&key, claim, "shutdown", Instant::now())
        {
            Ok(()) => shutting_down(),
            Err(_) => log_unavailable(),
        };
    }
    let fault = if claim.may_time_out {
        fate::send_timeout(&sh.cfg, &key, claim.draw())
    } else {
        None
    };
    if fault == Some(TimeoutFault::BeforeCreate) {
        let why = TimeoutFault::BeforeCreate.as_str();
        let faulted = sh.lock().finish_faulted(&key, claim, why, Instant::now());
        if faulted.is_err() {
            return log_unavailable();
        }
        return hold(&sh).await;
    }
    let creation = Creation {
        callback,
        plan: fate::plan(&sh.cfg, &key, claim.draw()),
        fault,
    };
    let created = sh
        .lock()
        .finish_created(&key, claim, creation, Instant::now());
    let (answer, wake) = match created {
        Ok(a) => a,
        Err(_) => return log_unavailable(),
    };
    if wake {
        sh.timer_wake.notify_one();
    }
    if fault == Some(TimeoutFault::AfterCreate) {
        return hold(&sh).await;
    }
    json(StatusCode::CREATED, answer)
}

/// A lost answer: hold the request past any client's time-out, then `504`.
async fn hold(sh: &Shared) -> Response {
    wait(sh, sh.cfg.timeout_hold_ms).await;
    error(StatusCode::GATEWAY_TIMEOUT, "timeout")
}

async fn lookup(
    State(sh): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    if !authorized(&sh, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized: send Authorization: Bearer <api-key>",
        );
    }
    let key = match path {
        Ok(Path(k)) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("bad key in path: {e}")),
    };
    if let Err(e) = validate_key(&key) {
        return error(StatusCode::BAD_REQUEST, &format!("bad key in path: {e}"));
    }
    lookup_flow(&sh, &key).await
}

/// A lookup by a valid key, answered as the contract says (a dialect's
/// lookup translates the answer).
pub(crate) async fn lookup_flow(sh: &Shared, key: &str) -> Response {
    let key = key.to_string();
    if !sh.cfg.lookup {
        return match sh.lock().log_lookup_unsupported(&key) {
            Ok(()) => error(StatusCode::NOT_IMPLEMENTED, LOOKUP_NOT_SUPPORTED),
            Err(_) => log_unavailable(),
        };
    }
    if !wait(sh, latency_for(sh, &key, None)).await {
        return shutting_down();
    }
    let found = sh.lock().lookup(&key, Instant::now());
    match found {
        Ok(Some(body)) => json(StatusCode::OK, body),
        Ok(None) => error(StatusCode::NOT_FOUND, "not_found"),
        Err(_) => log_unavailable(),
    }
}
