//! The HTTP API of `courier serve`: enqueue (one action or a batch), read an
//! action, the operators' routes (cancel, re-drive, resolve; a store's and a
//! provider's flow-control settings), and the provider's status webhooks;
//! and [`serve`], the HTTP/1 loop that runs it (with the dashboard and
//! metrics of `crate::dashboard` merged in).
//!
//! The request and answer types carry `utoipa` annotations: the OpenAPI
//! document at `/openapi.json` is generated from them (`crate::openapi`),
//! and its tests compare it with what this server really answers.
//!
//! # Invariants
//! - Bad input gets a 4xx with a JSON error and changes nothing.
//! - A webhook with a missing or wrong signature gets 401 and changes nothing;
//!   a valid one is merged forward-only in the same transaction that records
//!   its event id, so a duplicate is a no-op.
//! - No client holds a connection slot for long without sending a request:
//!   a request head must arrive within `header_read_timeout_ms` (idle
//!   keep-alive connections included) and a whole request, body included,
//!   within `request_timeout`. At most `connections_max` connections are
//!   served at once; more wait in the kernel's accept queue.

pub use crate::api_error::ApiError;
pub(crate) mod settings;

use settings::{provider_get, provider_put, store_get, store_put, stores_list};
pub use settings::{
    ProviderFlowDoc, ProviderSettingsDoc, StoreFlowDoc, StoreFlowListDoc, StoreSettingsDoc,
    STORES_LISTED_MAX,
};

use crate::auth::{Auth, Caller};
use crate::group_commit::GroupCommit;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use courier_core::key::validate_key;
use courier_core::status::Merge;
use courier_core::{ActionState, Limits};
use courier_provider::signature;
use courier_provider::wire::WebhookEvent;
use courier_providers::{Inbound, Parsed, WebhookRegistry};
use courier_store::{
    CancelOutcome, EnqueueError, FlowError, MergeOutcome, NewAction, PgStore, RedriveOutcome,
    Resolution, ResolveOutcome, StoreError, StoreFlow, WebhookIn,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use utoipa::ToSchema;

#[derive(Clone)]
pub struct ServerConfig {
    pub limits: Limits,
    pub webhook_secret: Vec<u8>,
    /// Secrets also accepted on webhooks while the provider moves to a new
    /// one (rotation without downtime).
    pub webhook_secrets_previous: Vec<Vec<u8>>,
    /// An admin token (`--api-token`), besides the token table's. With
    /// [`router`], none makes the API open; `courier serve` decides with
    /// the token table too ([`router_with_auth`]).
    pub api_token: Option<String>,
    /// Longest time one request may take, reading its body included.
    pub request_timeout: Duration,
    /// The named providers whose webhooks this server takes, each on
    /// `POST /v1/webhooks/{name}` and checked with its own scheme
    /// (`courier_providers`); empty: none.
    pub provider_webhooks: WebhookRegistry,
}

struct AppState {
    store: PgStore,
    cfg: ServerConfig,
    auth: Auth,
    /// Webhook merges, committed together (each answered after its commit).
    webhooks: GroupCommit<WebhookIn, Result<MergeOutcome, StoreError>>,
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

/// A JSON object body as `T`. serde's derive would also take a JSON array
/// of a struct's fields in order, which no client means: a body must be an
/// object (its first character other than white space `{`).
fn object_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    code: &'static str,
) -> Result<T, ApiError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::bad(code, "the body must be a JSON object"));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad(code, e.to_string()))
}

/// The enqueue request: unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The tenant; fairness is across stores. Created on first use.
    #[schema(pattern = r"^[A-Za-z0-9._-]{1,64}$", example = "store-001")]
    pub store: String,
    /// The recipient in E.164 form.
    #[schema(pattern = r"^\+[1-9][0-9]{7,14}$", example = "+15551234567")]
    pub to: String,
    /// The text, 1 to 1,600 characters, without NUL.
    #[schema(
        min_length = 1,
        max_length = 1600,
        pattern = r"^[^\x00]+$",
        example = "Your order has shipped."
    )]
    pub body: String,
    /// The client's idempotency key within the store: the same `(store, key)`
    /// with the same content is the same action for as long as the action
    /// is kept, which is while it is unfinished and for the action retention
    /// after it finished (24 hours by default: the workers'
    /// `--action-retention-s`). A repeat after that is a new action.
    #[serde(default)]
    #[schema(pattern = r"^[\x20-\x7e]{1,255}$", example = "order-42")]
    pub key: Option<String>,
    /// Not sent before this time (RFC 3339): the action is `scheduled`
    /// until then, and claimable within a second after it. At most a day
    /// in the past (it is due at once) and 365 days ahead.
    #[serde(default)]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-24T09:00:00Z")]
    pub not_before: Option<DateTime<Utc>>,
    /// Never sent after this time (RFC 3339): an action not sent by then
    /// ends `expired`. Must be ahead, later than `not_before`, and at most
    /// 365 days ahead.
    #[serde(default)]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-24T09:10:00Z")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// The answer to a refused enqueue (single or batch). The checks are the
/// SQL enqueue's (`courier.enqueue_problem`, migration 21), the same for
/// every caller; its stable codes become the answer's `error`.
fn enqueue_refused(e: EnqueueError) -> ApiError {
    match e {
        EnqueueError::Invalid(i) => {
            let code = match i.code.as_str() {
                "bad_store" => "bad_store",
                "bad_phone" => "bad_phone",
                "empty_body" => "empty_body",
                "body_too_long" => "body_too_long",
                "bad_body" => "bad_body",
                "bad_key" => "bad_key",
                "too_many_items" => "too_many_actions",
                "time_too_old" => "time_too_old",
                "time_too_far" => "time_too_far",
                "already_expired" => "already_expired",
                "expires_before_not_before" => "expires_before_not_before",
                _ => "bad_request",
            };
            ApiError::bad(code, i.message).at(Some(i.field), i.index)
        }
        EnqueueError::KeyReused { index, message, .. } => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "key_reused", message)
                .at(Some("key".into()), index)
        }
        EnqueueError::Store(e) => e.into(),
    }
}

impl From<EnqueueRequest> for NewAction {
    fn from(r: EnqueueRequest) -> Self {
        NewAction {
            store: r.store,
            to: r.to,
            body: r.body,
            key: r.key,
            not_before: r.not_before,
            expires_at: r.expires_at,
        }
    }
}

/// Checks a webhook event's identifiers before they reach the database.
fn validate_event(e: &WebhookEvent) -> Result<(), ApiError> {
    validate_key(&e.key).map_err(|err| ApiError::bad("bad_event", format!("key: {err}")))?;
    for (name, v) in [("event_id", &e.event_id), ("message_id", &e.message_id)] {
        let ok = (1..=255).contains(&v.len()) && v.bytes().all(|b| (0x20..=0x7e).contains(&b));
        if !ok {
            return Err(ApiError::bad(
                "bad_event",
                format!("{name} must be 1..255 printable ASCII characters"),
            ));
        }
    }
    Ok(())
}

/// 403: a store token used on a store it does not name.
fn forbidden_store(store: &str, index: Option<usize>) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden_store",
        format!("this token may not enqueue for store {store:?}"),
    )
    .at(Some("store".into()), index)
}

/// The schema of an action's state: the names of `courier_core::ActionState`,
/// so the document cannot drift from the enum.
fn action_state_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(ActionState::ALL.iter().map(|s| s.as_str())))
        .description(Some("The state of an action."))
        .build()
}

/// A message status, as the courier knows it (forward-only).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatusDoc {
    Sending,
    Accepted,
    Sent,
    Delivered,
    Failed,
}

/// An action as the API shows it (`courier_store::ActionView`; a test checks
/// that the two agree field by field).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Action)]
pub struct ActionDoc {
    pub id: i64,
    pub store: String,
    /// The client's key, if one was given.
    #[schema(required = true)]
    pub key: Option<String>,
    pub to: String,
    #[schema(schema_with = action_state_schema)]
    pub state: ActionState,
    /// The fencing token: +1 at every claim.
    pub epoch: i64,
    /// None until the intent is written.
    #[schema(required = true)]
    pub status: Option<StatusDoc>,
    /// The key every request to the provider carries (`courier-<uid>`).
    #[schema(required = true)]
    pub idempotency_key: Option<String>,
    pub attempts: i32,
    #[schema(required = true)]
    pub message_id: Option<String>,
    #[schema(required = true)]
    pub fail_reason: Option<String>,
    /// UTC, RFC 3339 with milliseconds.
    #[schema(format = DateTime)]
    pub enqueued_at: String,
    /// Not sent before this time (UTC, RFC 3339 with milliseconds).
    #[schema(required = true, format = DateTime)]
    pub not_before: Option<String>,
    /// Never sent after this time (UTC, RFC 3339 with milliseconds).
    #[schema(required = true, format = DateTime)]
    pub expires_at: Option<String>,
    /// The action this one re-drives.
    #[schema(required = true)]
    pub redrive_of: Option<i64>,
    /// The action that re-drove this one.
    #[schema(required = true)]
    pub redriven_as: Option<i64>,
}

/// Every error answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Error)]
pub struct ErrorDoc {
    /// A stable code (`bad_json`, `bad_store`, `unauthorized`, ...).
    pub error: String,
    /// A sentence for people.
    pub message: String,
    /// The request's field at fault (`store`, `to`, `body`, `key`,
    /// `actions`; a settings field, `provider`), when one is.
    #[serde(default)]
    pub field: Option<String>,
    /// The item of a batch at fault (0-based), when one is.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub index: Option<u32>,
}

/// A status webhook from the provider, signed with
/// `X-Signature: sha256=<hex HMAC-SHA256 of the raw body>`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = WebhookEvent)]
pub struct WebhookEventDoc {
    pub event_id: String,
    pub message_id: String,
    /// The idempotency key of the send.
    pub key: String,
    pub status: StatusDoc,
    #[schema(format = DateTime)]
    pub occurred_at: String,
}

/// What a webhook did.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookOutcome {
    Advanced,
    Same,
    BackwardIgnored,
    ConflictRecorded,
    Duplicate,
}

/// The answer to an accepted webhook.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WebhookAnswer)]
pub struct WebhookAnswerDoc {
    pub outcome: WebhookOutcome,
}

/// Enqueue an action.
#[utoipa::path(
    post,
    path = "/v1/actions",
    tag = "actions",
    request_body(content = EnqueueRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Enqueued.", body = ActionDoc),
        (status = 200, description = "The same `(store, key)` and content was enqueued before, and that \
         action is still kept (unfinished, or finished within the action retention, 24 hours by default): \
         that action. After the retention the same `(store, key)` is a new action (201).",
         body = ActionDoc,
         headers(("idempotent-replayed" = String, description = "`true`"))),
        (status = 400, description = "Malformed JSON, an unknown field, a field out of its limits (`field` names it), or a token in the query string.", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token used for another store (`forbidden_store`).", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 413, description = "The body is larger than the payload limit.", body = ErrorDoc),
        (status = 422, description = "The key was used before in this store with a different request.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn enqueue(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_or_error(body)?;
    let req: EnqueueRequest = object_body(&body, "bad_json")?;
    if !caller.may(&req.store) {
        return Err(forbidden_store(&req.store, None));
    }
    let (id, created) = match state.store.action_enqueue(&req.into()).await {
        Ok(e) => (e.id(), e.created()),
        Err(e) => return Err(enqueue_refused(e)),
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

/// A batch of enqueue requests: all or nothing.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueBatchRequest {
    /// The actions, each as `POST /v1/actions` takes it; at most the
    /// server's batch maximum (1,000 by default).
    pub actions: Vec<EnqueueRequest>,
}

/// One action of a batch, in the request's order.
#[derive(Debug, Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueuedItem {
    pub id: i64,
    /// True when this request created the action; false for a repeat of a
    /// kept action or of an earlier item of the same batch (same store,
    /// key and content).
    pub created: bool,
}

/// The answer to a batch.
#[derive(Debug, Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueBatchAnswer {
    pub actions: Vec<EnqueuedItem>,
}

/// Enqueue many actions in one transaction: all or nothing.
#[utoipa::path(
    post,
    path = "/v1/actions:batch",
    tag = "actions",
    request_body(content = EnqueueBatchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Every action enqueued (or found as a repeat), in the request's order.",
         body = EnqueueBatchAnswer),
        (status = 400, description = "Malformed JSON, an unknown field, more actions than the batch maximum,          or an action with a field out of its limits (`index` and `field` name it); nothing was enqueued.",
         body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token used for another store (`forbidden_store`; `index` names the action).", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 413, description = "The body is larger than the batch payload limit.", body = ErrorDoc),
        (status = 422, description = "An action's key was used before in its store, or by an earlier action \
         of the batch, with a different request (`index` names it); nothing was enqueued.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry (with the same keys).", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn enqueue_batch(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_or_error(body)?;
    let req: EnqueueBatchRequest = object_body(&body, "bad_json")?;
    let max = state.cfg.limits.enqueue_batch_max as usize;
    if req.actions.len() > max {
        return Err(ApiError::bad(
            "too_many_actions",
            format!("{} actions; at most {max} in one batch", req.actions.len()),
        )
        .at(Some("actions".into()), None));
    }
    if let Some((i, a)) = req
        .actions
        .iter()
        .enumerate()
        .find(|(_, a)| !caller.may(&a.store))
    {
        return Err(forbidden_store(&a.store, Some(i)));
    }
    let news: Vec<NewAction> = req.actions.into_iter().map(NewAction::from).collect();
    let made = state
        .store
        .actions_enqueue_many(&news)
        .await
        .map_err(enqueue_refused)?;
    let created = made.iter().filter(|e| e.created()).count() as u64;
    metrics::counter!("courier_enqueued_total", "created" => "true").increment(created);
    metrics::counter!("courier_enqueued_total", "created" => "false")
        .increment(made.len() as u64 - created);
    let answer = EnqueueBatchAnswer {
        actions: made
            .iter()
            .map(|e| EnqueuedItem {
                id: e.id(),
                created: e.created(),
            })
            .collect(),
    };
    Ok(Json(answer).into_response())
}

/// Read an action.
#[utoipa::path(
    get,
    path = "/v1/actions/{id}",
    tag = "actions",
    params(("id" = i64, Path, description = "The action's id")),
    responses(
        (status = 200, description = "The action.", body = ActionDoc),
        (status = 400, description = "The id is not an integer.", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 404, description = "No action has this id, or it belongs to a store the token does not name.", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn get_action(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = action_id(id)?;
    // Another store's action is not found: a token does not learn which
    // actions, or stores, exist beyond its own.
    match state.store.action_get(id).await? {
        Some(view) if caller.may(&view.store) => Ok(Json(view).into_response()),
        _ => Err(not_found(id)),
    }
}

/// The `{id}` of an action's path.
fn action_id(id: Result<Path<String>, PathRejection>) -> Result<i64, ApiError> {
    let Path(id) = id.map_err(|r| ApiError::bad("bad_id", r.body_text()))?;
    id.parse()
        .map_err(|_| ApiError::bad("bad_id", "action id must be an integer"))
}

/// 403 unless an admin token: `what` (plural) needs one.
fn admin_only(caller: &Caller, what: &str) -> Result<(), ApiError> {
    if caller.is_admin() {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "admin_only",
        format!("{what} need an admin token"),
    ))
}

/// The action as an answer of an operator's route, right after it changed.
async fn view_of(state: &AppState, id: i64) -> Result<courier_store::ActionView, ApiError> {
    state
        .store
        .action_get(id)
        .await?
        .ok_or_else(|| not_found(id))
}

fn not_found(id: i64) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no action {id}"),
    )
}

/// Cancel an action that no worker holds.
#[utoipa::path(
    post,
    path = "/v1/actions/{id}/cancel",
    tag = "actions",
    params(("id" = i64, Path, description = "The action's id")),
    responses(
        (status = 200, description = "Cancelled: it was scheduled or pending, is now `cancelled`, and no worker will claim it. Nothing was sent.", body = ActionDoc),
        (status = 400, description = "The id is not an integer.", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 404, description = "No action has this id, or it belongs to a store the token does not name.", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 409, description = "Nothing changed. `claimed`: a worker holds it, its first attempt is counted and a request may be on the wire; `dispatched`: the provider has it; `final`: it has ended. Wait for its final status (`GET /v1/actions/{id}`).", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn cancel_action(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = action_id(id)?;
    let outcome = state
        .store
        .action_cancel(id, caller.name(), caller.stores())
        .await?;
    match outcome {
        CancelOutcome::Cancelled => {
            metrics::counter!("courier_cancelled_total").increment(1);
            Ok(Json(view_of(&state, id).await?).into_response())
        }
        CancelOutcome::NotFound => Err(not_found(id)),
        CancelOutcome::Refused(now) => Err(cancel_refused(id, now)),
    }
}

/// 409: why an action cannot be cancelled, and what to do instead.
fn cancel_refused(id: i64, now: ActionState) -> ApiError {
    let wait = format!("wait for its final status (GET /v1/actions/{id})");
    let (code, why) = match now {
        ActionState::Claimed => (
            "claimed",
            format!(
                "a worker holds it: its first attempt is counted and a request may be on the wire; {wait}"
            ),
        ),
        ActionState::Dispatched => (
            "dispatched",
            format!("the provider has the message; {wait}"),
        ),
        ActionState::Unknown => (
            "unknown",
            "an attempt may have reached the provider and nothing can tell; an operator \
             resolves it (POST /v1/actions/{id}/resolve)"
                .to_string(),
        ),
        _ => ("final", "it has ended".to_string()),
    };
    ApiError::new(
        StatusCode::CONFLICT,
        code,
        format!("action {id} is {now} and cannot be cancelled: {why}"),
    )
}

/// Re-drive an action the provider refused with a 400, or one resolved as
/// not sent (operators only).
#[utoipa::path(
    post,
    path = "/v1/actions/{id}/redrive",
    tag = "actions",
    params(("id" = i64, Path, description = "The action's id")),
    responses(
        (status = 200, description = "Re-driven before: the earlier re-drive's new action.", body = ActionDoc),
        (status = 201, description = "A new action with a new provider key, the same store, recipient and body, linked both ways (`redrive_of`, `redriven_as`).", body = ActionDoc),
        (status = 400, description = "The id is not an integer.", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token: re-drives need an admin token.", body = ErrorDoc),
        (status = 404, description = "No action has this id.", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 409, description = "`not_redrivable`: only an action the provider refused with a 400 (which created nothing), or one an operator resolved as `not_sent`, can be re-driven; any other ending may have had an effect, or its key already has a message (422).", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn redrive_action(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = action_id(id)?;
    admin_only(&caller, "re-drives")?;
    let (status, new_id) = match state.store.action_redrive(id, caller.name(), None).await? {
        RedriveOutcome::Redriven(new_id) => (StatusCode::CREATED, new_id),
        RedriveOutcome::Already(new_id) => (StatusCode::OK, new_id),
        RedriveOutcome::NotFound => return Err(not_found(id)),
        RedriveOutcome::Refused { state: now, reason } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_redrivable",
                format!("action {id} is {now} and cannot be re-driven: {reason}"),
            ));
        }
    };
    if status == StatusCode::CREATED {
        metrics::counter!("courier_redriven_total").increment(1);
    }
    Ok((status, Json(view_of(&state, new_id).await?)).into_response())
}

/// How an operator resolves an action held `unknown`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// `sent`: the provider has the message (the action ends `done`);
    /// `not_sent`: nothing went out (it ends `failed`, and may be re-driven).
    #[schema(value_type = ResolutionDoc)]
    pub outcome: Resolution,
}

/// What an operator found out about an action held `unknown`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResolutionDoc {
    Sent,
    NotSent,
}

/// Resolve an action held `unknown` (operators only).
#[utoipa::path(
    post,
    path = "/v1/actions/{id}/resolve",
    tag = "actions",
    params(("id" = i64, Path, description = "The action's id")),
    request_body(content = ResolveRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Resolved: `sent` ended it `done`, `not_sent` ended it `failed` (re-drive it to send it again, with a new key). An `events` row records the token's name.", body = ActionDoc),
        (status = 400, description = "The id is not an integer, or the body is not `{\"outcome\": \"sent\" | \"not_sent\"}`.", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token: resolutions need an admin token.", body = ErrorDoc),
        (status = 404, description = "No action has this id.", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 409, description = "`not_unknown`: the action is not held `unknown` (its outcome is known, or a webhook carrying its key moved it on); nothing changed.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
async fn resolve_action(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = action_id(id)?;
    admin_only(&caller, "resolutions")?;
    let req: ResolveRequest = object_body(&body_or_error(body)?, "bad_body").map_err(|e| {
        ApiError::bad(
            "bad_body",
            format!(
                "expected {{\"outcome\": \"sent\" | \"not_sent\"}}: {}",
                e.message()
            ),
        )
    })?;
    let outcome = state
        .store
        .action_resolve(id, req.outcome, caller.name(), None)
        .await?;
    match outcome {
        ResolveOutcome::Resolved(_) => {
            metrics::counter!("courier_resolved_total", "as" => req.outcome.as_str()).increment(1);
            Ok(Json(view_of(&state, id).await?).into_response())
        }
        ResolveOutcome::NotFound => Err(not_found(id)),
        ResolveOutcome::Refused(now) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_unknown",
            format!("action {id} is {now}, not unknown: only an action held unknown is resolved"),
        )),
    }
}

/// A status webhook from the provider.
#[utoipa::path(
    post,
    path = "/v1/webhooks/provider",
    tag = "webhooks",
    params(("x-signature" = String, Header,
            description = "`sha256=` and the hex HMAC-SHA256 of the raw body with the shared secret")),
    request_body(content = WebhookEventDoc, content_type = "application/json"),
    responses(
        (status = 200, description = "Merged forward-only (or absorbed as a duplicate).", body = WebhookAnswerDoc),
        (status = 400, description = "Signed, but not a valid event.", body = ErrorDoc),
        (status = 401, description = "Missing or wrong signature; nothing changed.", body = ErrorDoc),
        (status = 404, description = "No intent has this key.", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 413, description = "The body is larger than the payload limit.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; the provider retries.", body = ErrorDoc),
    )
)]
async fn webhook(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_or_error(body)?;
    let sig = headers.get(signature::HEADER).map(|v| v.as_bytes());
    let signed = std::iter::once(&state.cfg.webhook_secret)
        .chain(&state.cfg.webhook_secrets_previous)
        .any(|secret| signature::verify(secret, &body, sig));
    if !signed {
        metrics::counter!("courier_webhook_signature_failures_total").increment(1);
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "bad_signature",
            "missing or wrong X-Signature",
        ));
    }
    let event: WebhookEvent = object_body(&body, "bad_json")?;
    validate_event(&event)?;
    let outcome = state
        .webhooks
        .call(WebhookIn {
            event_id: event.event_id,
            key: event.key,
            status: event.status,
            message_id: event.message_id,
        })
        .await??;
    merged_answer(outcome)
}

/// A named provider's status webhook (`courier_providers`): checked with
/// that provider's own signature scheme, then merged like the contract's.
/// Not in the OpenAPI document: its format is the provider's
/// (`docs/providers.md`).
async fn named_webhook(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let hooks = state.cfg.provider_webhooks.get(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_such_provider",
            format!("this server takes no webhooks of a provider named {name:?}"),
        )
    })?;
    let body = body_or_error(body)?;
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok());
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let url = state.cfg.provider_webhooks.called_url(host, path);
    let pairs: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let inbound = Inbound {
        url: &url,
        headers: &pairs,
        body: &body,
        now_s: Utc::now().timestamp(),
    };
    let report = match hooks.receive(&inbound) {
        Ok(Parsed::Report(r)) => r,
        Ok(Parsed::Ignored(why)) => {
            return Ok(Json(json!({"outcome": "ignored", "why": why})).into_response());
        }
        Err(refusal) => {
            if refusal.http_status() == 401 {
                metrics::counter!("courier_webhook_signature_failures_total").increment(1);
            }
            let code = if refusal.http_status() == 401 {
                "bad_signature"
            } else {
                "bad_json"
            };
            let status =
                StatusCode::from_u16(refusal.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
            return Err(ApiError::new(
                status,
                code,
                format!("{name} webhook refused: {refusal}"),
            ));
        }
    };
    if validate_key(&report.key).is_err() {
        return Err(ApiError::bad(
            "bad_json",
            "the webhook carries no courier key",
        ));
    }
    let outcome = state
        .webhooks
        .call(WebhookIn {
            event_id: format!("{name}:{}", report.event_id),
            key: report.key,
            status: report.status,
            message_id: report.message_id,
        })
        .await??;
    merged_answer(outcome)
}

/// The answer to a merged webhook, counted by its outcome.
fn merged_answer(outcome: MergeOutcome) -> Result<Response, ApiError> {
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
            ));
        }
    };
    metrics::counter!("courier_webhooks_total", "outcome" => label).increment(1);
    Ok(Json(json!({"outcome": label})).into_response())
}

/// `GET /healthz`: the process answers and its database does (one cheap,
/// read-only query; the age is a century, so the count is ~0 and no interval
/// overflows).
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    const CENTURY_S: u64 = 100 * 365 * 24 * 3600;
    match state.store.intents_older_than(CENTURY_S).await {
        Ok(_) => (StatusCode::OK, Json(json!({"ok": true}))).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

async fn no_route() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such route")
}

async fn no_method() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take this method",
    )
}

/// Authenticates a request to the actions' routes before its body is read
/// (an unauthenticated client never makes the server read or parse one),
/// and hands the handler its [`Caller`].
async fn authenticate(State(auth): State<Auth>, mut req: Request, next: Next) -> Response {
    match auth.check(req.uri(), req.headers()) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

/// Ends a request that takes longer than `timeout` (its body included) with
/// a JSON 408.
async fn deadline(timeout: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!("the request took longer than {} ms", timeout.as_millis()),
        )
        .into_response(),
    }
}

/// Refuses a request whose declared length is over `limit` with a JSON 413
/// at once, before any of its body is read (a chunked body is counted as it
/// is read, by the body limit of the routes).
async fn declared_size(limit: usize, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit as u64 => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body is {n} bytes; the limit is {limit}"),
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

/// The most webhooks merged in one transaction.
const WEBHOOK_BATCH_MAX: usize = 256;

/// The API's router: the actions' routes, the settings' routes, the
/// webhooks, `/healthz`, and JSON answers for unknown routes and methods. Merge other routers into it (they must not
/// set a fallback of their own). Must be called within a tokio runtime: it
/// starts the webhook batcher.
pub fn router(store: PgStore, cfg: ServerConfig) -> Router {
    let auth = Auth::start(
        store.clone(),
        cfg.api_token.clone(),
        cfg.api_token.is_none(),
    );
    router_with_auth(store, cfg, auth)
}

/// [`router`] with the caller's authentication (`courier serve` decides
/// whether the API is open; the dashboard and `/metrics` share it).
pub fn router_with_auth(store: PgStore, cfg: ServerConfig, auth: Auth) -> Router {
    let limit = cfg.limits.payload_bytes_max as usize;
    let cfg_batch_limit = cfg.limits.batch_payload_bytes_max as usize;
    let timeout = cfg.request_timeout;
    let webhooks = {
        let store = store.clone();
        GroupCommit::start(WEBHOOK_BATCH_MAX, 2, move |events: Vec<WebhookIn>| {
            let store = store.clone();
            async move { store.webhooks_merge(&events).await }
        })
    };
    let state = Arc::new(AppState {
        store,
        cfg,
        auth,
        webhooks,
    });
    // The actions' routes authenticate before their handler reads a byte
    // of the body; the webhook route is signed instead, /healthz open.
    let guard = axum::middleware::from_fn_with_state(state.auth.clone(), authenticate);
    // A batch has a body limit of its own; every other route the one of a
    // single action.
    let batch_limit = cfg_batch_limit;
    let batch = Router::new()
        .route("/v1/actions:batch", post(enqueue_batch))
        .route_layer(guard.clone())
        .layer(DefaultBodyLimit::max(batch_limit))
        .layer(axum::middleware::from_fn(move |req, next| {
            declared_size(batch_limit, req, next)
        }));
    let actions = Router::new()
        .route("/v1/actions", post(enqueue))
        .route("/v1/actions/{id}", get(get_action))
        .route("/v1/actions/{id}/cancel", post(cancel_action))
        .route("/v1/actions/{id}/redrive", post(redrive_action))
        .route("/v1/actions/{id}/resolve", post(resolve_action))
        .route("/v1/stores", get(stores_list))
        .route("/v1/stores/{store}", get(store_get).put(store_put))
        .route("/v1/providers/{name}", get(provider_get).put(provider_put))
        .route_layer(guard);
    actions
        .route("/v1/webhooks/provider", post(webhook))
        .route("/v1/webhooks/{name}", post(named_webhook))
        .route("/healthz", get(healthz))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(move |req, next| {
            declared_size(limit, req, next)
        }))
        .merge(batch)
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(axum::middleware::from_fn(move |req, next| {
            deadline(timeout, req, next)
        }))
        .with_state(state)
}

/// Limits of the HTTP server itself, below the routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// A client must send a whole request head within this time, or the
    /// connection is closed (slow clients; idle keep-alive connections).
    pub header_read_timeout_ms: u64,
    /// Connections served at once; more wait in the kernel's accept queue.
    /// Lowered at start to what the open-files limit allows.
    pub connections_max: usize,
    /// Largest request head (request line and headers); 431 above.
    pub header_bytes_max: usize,
    /// Most header fields in one request; 431 above.
    pub headers_max: usize,
    /// How long shutdown waits for requests in progress.
    pub shutdown_grace_ms: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read_timeout_ms: 10_000,
            connections_max: 16_384,
            header_bytes_max: 16 * 1024,
            headers_max: 64,
            shutdown_grace_ms: 5_000,
        }
    }
}

/// File descriptors kept free of connections (the listener, database
/// connections, files, the runtime's own).
pub const FDS_RESERVED: u64 = 256;

impl HttpLimits {
    pub fn validate(&self) -> Result<(), ServeError> {
        let bad = |m: &str| Err(ServeError::Limits(m.to_string()));
        if self.header_read_timeout_ms == 0 {
            return bad("header_read_timeout_ms must be positive");
        }
        if self.connections_max == 0 {
            return bad("connections_max must be positive");
        }
        if !(1024..=1024 * 1024).contains(&self.header_bytes_max) {
            return bad("header_bytes_max must be within 1 KiB..=1 MiB");
        }
        if !(8..=1024).contains(&self.headers_max) {
            return bad("headers_max must be within 8..=1024");
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid HTTP limits: {0}")]
    Limits(String),
}

/// Connections the kernel may hold completed but not yet accepted (capped
/// by `net.core.somaxconn`): room for bursts of connections.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` (`host:port`; port 0 picks a free one) with a listen backlog
/// of [`LISTEN_BACKLOG`] (tokio's `TcpListener::bind` uses 1024).
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{addr} names no address"),
        )
    }))
}

/// Whether `addr` (`host:port`) resolves to any address outside the
/// loopback range (127.0.0.0/8, ::1): `0.0.0.0`, `::` and a host name that
/// resolves elsewhere all do. A listener there must not be open: `courier
/// serve` and a worker's metrics refuse to bind it without a token.
pub async fn beyond_loopback(addr: &str) -> std::io::Result<bool> {
    let mut any = false;
    for a in tokio::net::lookup_host(addr).await? {
        any = true;
        if !a.ip().is_loopback() {
            return Ok(true);
        }
    }
    if !any {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{addr} names no address"),
        ));
    }
    Ok(false)
}

/// Raises this process's soft limit of open files towards `want` (up to the
/// hard limit; as root, the hard limit too) and returns the soft limit now.
pub fn raise_fd_limit(want: u64) -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= want {
        return Ok(soft);
    }
    if want > hard && setrlimit(Resource::RLIMIT_NOFILE, want, want).is_ok() {
        return Ok(want);
    }
    let soft_new = want.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, soft_new, hard)?;
    Ok(soft_new)
}

/// How many connections [`serve`] serves at once: `connections_max`, lowered
/// when the open-files limit cannot be raised to fit it.
fn connection_cap(limits: &HttpLimits) -> usize {
    let want = limits.connections_max as u64 + FDS_RESERVED;
    let fds = raise_fd_limit(want).unwrap_or(want);
    let cap = limits
        .connections_max
        .min(fds.saturating_sub(FDS_RESERVED).max(1) as usize);
    if cap < limits.connections_max {
        tracing::warn!(
            connections_max = limits.connections_max,
            open_files_max = fds,
            "the open-files limit is too low; serving at most {cap} connections"
        );
    }
    cap
}

/// The HTTP/1.1 connection settings of [`serve`]: the header read time-out
/// and the header limits.
fn http1(limits: &HttpLimits) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .max_headers(limits.headers_max)
        .max_buf_size(limits.header_bytes_max.max(8192) * 2)
        .max_header_size(limits.header_bytes_max);
    http
}

/// Serves `app` on `listener` over HTTP/1.1 until `shutdown` is cancelled,
/// then lets requests in progress finish for up to `shutdown_grace_ms`.
///
/// Unlike `axum::serve`, it bounds how long a client may take to send a
/// request head and how many connections are served at once, and raises the
/// open-files limit to fit `connections_max` (lowering the cap when it cannot).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &HttpLimits,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;

    limits.validate()?;
    let http = http1(limits);
    let permits = Arc::new(Semaphore::new(connection_cap(limits)));
    let tracker = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // A connection that failed before we took it, or a lack of
                    // file descriptors: wait a little rather than spin.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(app.clone());
        let conn = http.serve_connection(TokioIo::new(stream), svc);
        let stop = shutdown.clone();
        tracker.spawn(async move {
            let _permit = permit;
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    tracker.close();
    let grace = Duration::from_millis(limits.shutdown_grace_ms);
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!(
            connections = tracker.len(),
            "requests still in progress after the shutdown grace; leaving them"
        );
    }
    Ok(())
}
