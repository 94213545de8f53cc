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
//! - The schemas of a store's and a provider's settings state the bounds
//!   of `courier_core::rate` (a test compares them).
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
    ("get", "/v1/stores", 408),
    ("get", "/v1/stores", 503),
    ("get", "/v1/stores/{store}", 408),
    ("get", "/v1/stores/{store}", 503),
    ("put", "/v1/stores/{store}", 503),
    ("get", "/v1/providers/{name}", 408),
    ("get", "/v1/providers/{name}", 503),
    ("put", "/v1/providers/{name}", 503),
];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "courier",
        description = "Exactly-once text messages over an unreliable provider: enqueue an \
                       action, read it back, and receive the provider's signed status webhooks; \
                       operators set a store's rate and in-flight cap and a provider's ceiling. \
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
        crate::server::settings::stores_list,
        crate::server::settings::store_get,
        crate::server::settings::store_put,
        crate::server::settings::provider_get,
        crate::server::settings::provider_put,
        crate::server::webhook
    ),
    modifiers(&BearerScheme, &BurstNeedsRate),
    tags(
        (name = "actions", description = "Enqueue (one or a batch, now or scheduled, with a deadline or not), read, cancel, re-drive and resolve actions (bearer token when configured)."),
        (name = "settings", description = "Flow control (admin token): a store's rate, burst and in-flight cap, and a provider's ceiling and pause. A change takes effect at every worker's next claim."),
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

/// The settings' request bodies state what their bounds cannot: a `burst`
/// needs a `rate_per_s` (`courier_core::rate::validate_rate`). Each body is
/// its settings' schema and, with it, one of: no burst (absent or null), or
/// a rate that is a number. The answers' `settings` keep the plain schema
/// (a burst in force always has its rate).
struct BurstNeedsRate;

impl Modify for BurstNeedsRate {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{AllOfBuilder, AnyOfBuilder, ObjectBuilder, Type};
        use utoipa::openapi::{Ref, RefOr};
        for (path, settings) in [
            ("/v1/stores/{store}", "StoreSettings"),
            ("/v1/providers/{name}", "ProviderSettings"),
        ] {
            let no_burst = ObjectBuilder::new()
                .property("burst", ObjectBuilder::new().schema_type(Type::Null));
            let a_rate = ObjectBuilder::new()
                .property("rate_per_s", ObjectBuilder::new().schema_type(Type::Number))
                .required("rate_per_s");
            let body = AllOfBuilder::new()
                .item(Ref::from_schema_name(settings))
                .item(
                    AnyOfBuilder::new()
                        .item(no_burst)
                        .item(a_rate)
                        .description(Some("A `burst` needs a `rate_per_s`.")),
                )
                .build();
            let request = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| item.put.as_mut())
                .and_then(|op| op.request_body.as_mut());
            let Some(RefOr::T(request)) = request else {
                continue;
            };
            for content in request.content.values_mut() {
                if let RefOr::T(c) = content {
                    c.schema = Some(RefOr::T(body.clone().into()));
                }
            }
        }
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
