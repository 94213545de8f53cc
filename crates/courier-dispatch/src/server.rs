//! The HTTP API of `courier serve`: enqueue, read an action, and the
//! provider's status webhooks.
//!
//! # Invariants
//! - Bad input gets a 4xx with a JSON error and changes nothing.
//! - A webhook with a missing or wrong signature gets 401 and changes nothing;
//!   a valid one is merged forward-only in the same transaction that records
//!   its event id, so a duplicate is a no-op.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use courier_core::key::validate_key;
use courier_core::phone::validate_phone;
use courier_core::status::Merge;
use courier_core::Limits;
use courier_provider::signature;
use courier_provider::wire::WebhookEvent;
use courier_store::{EnqueueError, Enqueued, MergeOutcome, NewAction, PgStore, StoreError};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct ServerConfig {
    pub limits: Limits,
    pub webhook_secret: Vec<u8>,
    /// When set, enqueue and reads need `Authorization: Bearer <token>`.
    pub api_token: Option<String>,
    /// Longest time one request may take, reading its body included.
    pub request_timeout: Duration,
}

struct AppState {
    store: PgStore,
    cfg: ServerConfig,
}

/// An error answer: a status and `{"error": code, "message": text}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": self.code, "message": self.message})),
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => {
                tracing::warn!(error = m, "database unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the database is unavailable; retry",
                )
            }
            StoreError::Query(m) => {
                tracing::error!(error = m, "database error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}

fn body_or_error(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        let status = r.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "payload_too_large"
        } else {
            "bad_body"
        };
        ApiError::new(status, code, r.body_text())
    })
}

/// The enqueue request: unknown fields are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    pub store: String,
    pub to: String,
    pub body: String,
    #[serde(default)]
    pub key: Option<String>,
}

/// Checks an enqueue request against the limits; the error names the field.
pub fn validate_enqueue(req: &EnqueueRequest, limits: &Limits) -> Result<(), ApiError> {
    let store_ok = (1..=64).contains(&req.store.len())
        && req
            .store
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !store_ok {
        return Err(ApiError::bad(
            "bad_store",
            "store must be 1..64 characters of A-Z a-z 0-9 - _ .",
        ));
    }
    validate_phone(&req.to).map_err(|e| ApiError::bad("bad_phone", e.to_string()))?;
    let chars = req.body.chars().count();
    if chars == 0 {
        return Err(ApiError::bad("empty_body", "body must not be empty"));
    }
    if chars > limits.body_chars_max as usize {
        return Err(ApiError::bad(
            "body_too_long",
            format!(
                "body has {chars} characters; the limit is {}",
                limits.body_chars_max
            ),
        ));
    }
    if let Some(k) = &req.key {
        validate_key(k).map_err(|e| ApiError::bad("bad_key", e.to_string()))?;
    }
    Ok(())
}

fn check_token(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.cfg.api_token else {
        return Ok(());
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or(b"");
    let ok: bool = subtle::ConstantTimeEq::ct_eq(given, token.as_bytes()).into();
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        ))
    }
}

async fn enqueue(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_token(&state, &headers)?;
    let body = body_or_error(body)?;
    let req: EnqueueRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad("bad_json", e.to_string()))?;
    validate_enqueue(&req, &state.cfg.limits)?;
    let new = NewAction {
        store: req.store,
        to: req.to,
        body: req.body,
        key: req.key,
    };
    let (id, created) = match state.store.action_enqueue(&new).await {
        Ok(Enqueued::Created(id)) => (id, true),
        Ok(Enqueued::Existing(id)) => (id, false),
        Err(EnqueueError::KeyReused { existing_id }) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "key_reused",
                format!("key already used for action {existing_id} with a different request"),
            ))
        }
        Err(EnqueueError::Store(e)) => return Err(e.into()),
    };
    metrics::counter!("courier_enqueued_total", "created" => created.to_string()).increment(1);
    let view = state.store.action_get(id).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut resp = (status, Json(view)).into_response();
    if !created {
        resp.headers_mut().insert(
            "idempotent-replayed",
            "true".parse().expect("static header"),
        );
    }
    Ok(resp)
}

async fn get_action(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    check_token(&state, &headers)?;
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::bad("bad_id", "action id must be an integer"))?;
    match state.store.action_get(id).await? {
        Some(view) => Ok(Json(view).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no action {id}"),
        )),
    }
}

async fn webhook(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_or_error(body)?;
    let sig = headers.get(signature::HEADER).map(|v| v.as_bytes());
    if !signature::verify(&state.cfg.webhook_secret, &body, sig) {
        metrics::counter!("courier_webhook_signature_failures_total").increment(1);
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "bad_signature",
            "missing or wrong X-Signature",
        ));
    }
    let event: WebhookEvent =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad("bad_json", e.to_string()))?;
    let outcome = state
        .store
        .webhook_merge(&event.event_id, &event.key, event.status, &event.message_id)
        .await?;
    let label = match outcome {
        MergeOutcome::Applied(Merge::Advance(_)) => "advanced",
        MergeOutcome::Applied(Merge::Same) => "same",
        MergeOutcome::Applied(Merge::Backward) => "backward_ignored",
        MergeOutcome::Applied(Merge::Conflict) => "conflict_recorded",
        MergeOutcome::Duplicate => "duplicate",
        MergeOutcome::UnknownKey => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_key",
                "no intent has this key",
            ))
        }
    };
    metrics::counter!("courier_webhooks_total", "outcome" => label).increment(1);
    Ok(Json(json!({"outcome": label})).into_response())
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.intents_older_than(u64::MAX / 4).await {
        Ok(_) => (StatusCode::OK, Json(json!({"ok": true}))).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The API's router.
pub fn router(store: PgStore, cfg: ServerConfig) -> Router {
    let limit = cfg.limits.payload_bytes_max as usize;
    let timeout = cfg.request_timeout;
    let state = Arc::new(AppState { store, cfg });
    Router::new()
        .route("/v1/actions", post(enqueue))
        .route("/v1/actions/{id}", get(get_action))
        .route("/v1/webhooks/provider", post(webhook))
        .route("/healthz", get(healthz))
        .layer(DefaultBodyLimit::max(limit))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .with_state(state)
}
