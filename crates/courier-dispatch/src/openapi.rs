//! The OpenAPI 3 description of the API, generated with `utoipa` from the
//! annotations on the handlers and types of [`crate::server`], and served at
//! `GET /openapi.json`.
//!
//! The document is only worth what it agrees with: `tests/openapi.rs` sends
//! representative requests to a live server (real PostgreSQL, real HTTP) and
//! checks each answer against the documented responses of its operation: the
//! status must be documented, the body JSON, and the body valid against the
//! documented schema. Every documented response is provoked, except the few
//! that need a broken database ([`NOT_PROVOKED`]); `scripts/hostile.sh`
//! drives schemathesis with the same document.
//!
//! # Invariants
//! - Every answer of the API's routes is documented (status and body).
//! - The schema of an action lists exactly the fields the store's
//!   `ActionView` serializes (`additionalProperties: false`, all required).

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// Documented responses the conformance test does not provoke, because they
/// need the database to fail or stall (a read takes no body that a client
/// could hold back): `(method, path, status)`.
pub const NOT_PROVOKED: &[(&str, &str, u16)] = &[
    ("get", "/v1/actions/{id}", 408),
    ("post", "/v1/actions", 503),
    ("post", "/v1/actions:batch", 503),
    ("get", "/v1/actions/{id}", 503),
    ("post", "/v1/actions/{id}/cancel", 408),
    ("post", "/v1/actions/{id}/cancel", 503),
    ("post", "/v1/actions/{id}/redrive", 408),
    ("post", "/v1/actions/{id}/redrive", 503),
    ("post", "/v1/actions/{id}/resolve", 503),
    ("post", "/v1/webhooks/provider", 503),
];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "courier",
        description = "Exactly-once text messages over an unreliable provider: enqueue an \
                       action, read it back, and receive the provider's signed status webhooks. \
                       Errors are `{\"error\": code, \"message\": text}` with a 4xx status, and \
                       change nothing. An enqueue's `(store, key)` is remembered while its action \
                       is unfinished and for 24 hours after it finished (the default action \
                       retention); a repeat after that window is a new action."
    ),
    paths(
        crate::server::enqueue,
        crate::server::enqueue_batch,
        crate::server::get_action,
        crate::server::cancel_action,
        crate::server::redrive_action,
        crate::server::resolve_action,
        crate::server::webhook
    ),
    modifiers(&BearerScheme),
    tags(
        (name = "actions", description = "Enqueue (one or a batch, now or scheduled, with a deadline or not), read, cancel, re-drive and resolve actions (bearer token when configured)."),
        (name = "webhooks", description = "The provider's status reports (HMAC-signed).")
    )
)]
pub struct ApiDoc;

struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as JSON text.
pub fn document_json() -> String {
    document()
        .to_pretty_json()
        .expect("the OpenAPI document serializes")
}

/// `GET /openapi.json` (public: it describes, it reveals nothing).
pub fn router() -> Router {
    Router::new().route("/openapi.json", get(serve_document))
}

async fn serve_document() -> Response {
    static TEXT: OnceLock<String> = OnceLock::new();
    let text = TEXT.get_or_init(document_json).as_str();
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}
