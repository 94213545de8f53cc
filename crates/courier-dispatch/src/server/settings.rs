//! The settings' routes (operators only): a store's flow-control settings
//! (`PUT`/`GET /v1/stores/{store}`, `GET /v1/stores`) and a provider gate's
//! ceiling (`PUT`/`GET /v1/providers/{name}`), over `courier_store`'s
//! `flow` module; their OpenAPI schemas. The rest of the API is the parent
//! module's.

use super::*;
use courier_core::rate::{validate_name, ProviderSettings, SettingsError, StoreSettings};
use serde::de::DeserializeOwned;

/// A store's flow-control settings, as `PUT /v1/stores/{store}` takes them
/// and its answer shows them (`courier_core::rate::StoreSettings`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = StoreSettings)]
pub struct StoreSettingsDoc {
    /// Sends a second at most, shared by every worker (a token bucket in
    /// PostgreSQL that the claim debits): 0.001 to 100,000. Absent or null:
    /// no rate.
    #[serde(default)]
    #[schema(minimum = 0.001, maximum = 100000, example = 5.0)]
    pub rate_per_s: Option<f64>,
    /// The bucket's size: how many sends may leave at once after a quiet
    /// spell, 1 to 100,000. Only with a `rate_per_s`: a burst without one
    /// is refused (`field`: `burst`). Absent or null: one second's worth,
    /// `rate_per_s` rounded up (filled in when the settings are written).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100000, example = 10)]
    pub burst: Option<u32>,
    /// At most this many of the store's actions in flight at once, 1 to
    /// 10,000. Absent or null: the claiming worker's
    /// `--store-in-flight-max` (4 by default).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000, example = 2)]
    pub in_flight_max: Option<u32>,
}

/// A provider's ceiling, as `PUT /v1/providers/{name}` takes it and its
/// answer shows it (`courier_core::rate::ProviderSettings`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ProviderSettings)]
pub struct ProviderSettingsDoc {
    /// Sends a second at most to this provider, from every worker that
    /// names it (`courier worker --provider-gate`): 0.001 to 100,000.
    /// Absent or null: no ceiling.
    #[serde(default)]
    #[schema(minimum = 0.001, maximum = 100000, example = 50.0)]
    pub rate_per_s: Option<f64>,
    /// As a store's: 1 to 100,000, only with a `rate_per_s`; absent or
    /// null: one second's worth.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100000, example = 50)]
    pub burst: Option<u32>,
}

/// A store's settings as they stand, and what its bucket and its slots
/// hold now (`courier_store::StoreFlow`; a test checks that the two agree
/// field by field).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = StoreFlow)]
pub struct StoreFlowDoc {
    pub store: String,
    /// What is in force; a null field is its default.
    pub settings: StoreSettingsDoc,
    /// The store's actions in flight now, as the claims count them.
    pub in_flight: i32,
    /// Sends its bucket allows now (null: no rate).
    #[schema(required = true)]
    pub tokens: Option<f64>,
    /// When an operator last set its settings (null: never).
    #[schema(required = true, format = DateTime)]
    pub configured_at: Option<String>,
}

/// The configured stores (`GET /v1/stores`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = StoreFlowList)]
pub struct StoreFlowListDoc {
    /// The stores with a rate or an in-flight cap set, by name, at most
    /// 1,000.
    pub stores: Vec<StoreFlowDoc>,
    /// More stores are configured than listed.
    pub truncated: bool,
}

/// A provider's gate as it stands (`courier_store::ProviderFlow`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ProviderFlow)]
pub struct ProviderFlowDoc {
    pub provider: String,
    /// The ceiling in force; a null field is its default.
    pub settings: ProviderSettingsDoc,
    /// Sends its bucket allows now (null: no ceiling).
    #[schema(required = true)]
    pub tokens: Option<f64>,
    /// Milliseconds its pause still lasts: a "too many requests" from the
    /// provider pauses every worker's claims for it (null: not paused).
    #[schema(required = true, minimum = 0)]
    pub paused_ms: Option<u64>,
    /// Pauses begun or lengthened since the gate was made.
    #[schema(minimum = 0)]
    pub pauses: i64,
    /// When an operator last set its ceiling (null: never; a gate made by
    /// a pause alone).
    #[schema(required = true, format = DateTime)]
    pub configured_at: Option<String>,
}

/// The most stores `GET /v1/stores` lists.
pub const STORES_LISTED_MAX: usize = 1_000;

/// The `{store}` or `{name}` of a settings route, checked as an enqueue
/// checks a store's name (`courier_core::rate::validate_name`); a refusal
/// is `code` with `field`.
fn flow_name(
    field: &'static str,
    code: &'static str,
    name: Result<Path<String>, PathRejection>,
) -> Result<String, ApiError> {
    let Path(name) =
        name.map_err(|r| ApiError::bad(code, r.body_text()).at(Some(field.into()), None))?;
    validate_name(field, &name)
        .map_err(|e| ApiError::bad(code, e.to_string()).at(Some(field.into()), None))?;
    Ok(name)
}

/// 400 `bad_settings`, naming the field.
fn settings_refused(e: SettingsError) -> ApiError {
    ApiError::bad("bad_settings", e.to_string()).at(Some(e.field.into()), None)
}

fn flow_refused(e: FlowError) -> ApiError {
    match e {
        FlowError::Invalid(e) => settings_refused(e),
        FlowError::Store(e) => e.into(),
    }
}

/// A settings body as `T` (`StoreSettings`, `ProviderSettings`: serde
/// structs whose fields are all optional and that refuse unknown ones): a
/// JSON object (else 400 `bad_json`), each field at most once. A number
/// without a fraction is an integer however it is written (`10.0`, `1e1`),
/// as JSON Schema reads it. A refused field is named (400 `bad_settings`):
/// each field is read alone to find which.
fn settings_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let Fields(fields) = object_body(body, "bad_json")?;
    let mut object = serde_json::Map::new();
    for (name, value) in fields {
        if object.contains_key(&name) {
            return Err(
                ApiError::bad("bad_json", format!("{name} is given twice")).at(Some(name), None)
            );
        }
        let value = integral(value);
        let alone =
            serde_json::Value::Object([(name.clone(), value.clone())].into_iter().collect());
        if let Err(e) = serde_json::from_value::<T>(alone) {
            return Err(ApiError::bad("bad_settings", format!("{name}: {e}")).at(Some(name), None));
        }
        object.insert(name, value);
    }
    serde_json::from_value(serde_json::Value::Object(object))
        .map_err(|e| ApiError::bad("bad_settings", e.to_string()))
}

/// A JSON number without a fraction (and within f64's exact integers) as an
/// integer; any other value as it is.
fn integral(v: serde_json::Value) -> serde_json::Value {
    const EXACT_MAX: f64 = 9_007_199_254_740_992.0;
    match v.as_f64() {
        Some(f) if v.is_f64() && f.fract() == 0.0 && f.abs() <= EXACT_MAX => {
            serde_json::Value::from(f as i64)
        }
        _ => v,
    }
}

/// A JSON object's fields in their order, a field given twice kept twice
/// (`serde_json::Map` keeps the last).
struct Fields(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(field) = map.next_entry()? {
                    fields.push(field);
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Set a store's settings (operators only).
#[utoipa::path(
    put,
    path = "/v1/stores/{store}",
    tag = "settings",
    params(("store" = String, Path, description = "The store's name: 1 to 64 of `A-Z a-z 0-9 . _ -`",
            pattern = r"^[A-Za-z0-9._-]{1,64}$")),
    request_body(content = StoreSettingsDoc, content_type = "application/json"),
    responses(
        (status = 200, description = "Set: all three fields are replaced (one left out or null goes back to \
         its default), the store is created if it was never seen, and an `events` row (`store_settings`) \
         records the token's name and the old and new values. Every worker's next claim uses them (an \
         idle worker claims every 20 ms or so).", body = StoreFlowDoc),
        (status = 400, description = "Not a JSON object, malformed JSON, a bad store name (`bad_store`, `field`: \
         `store`), or a field unknown or out of its bounds, or a `burst` without a `rate_per_s` \
         (`bad_settings`, `field` names it); nothing changed.", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token: settings need an admin token (`admin_only`).", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 413, description = "The body is larger than the payload limit.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry (setting the same values again is harmless).", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn store_put(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    admin_only(&caller, "settings")?;
    let store = flow_name("store", "bad_store", name)?;
    let settings: StoreSettings = settings_body(&body_or_error(body)?)?;
    settings.validate().map_err(settings_refused)?;
    let flow = state
        .store
        .store_configure(&store, &settings, caller.name())
        .await
        .map_err(flow_refused)?;
    Ok(Json(flow).into_response())
}

/// Read a store's settings and state (operators only).
#[utoipa::path(
    get,
    path = "/v1/stores/{store}",
    tag = "settings",
    params(("store" = String, Path, description = "The store's name: 1 to 64 of `A-Z a-z 0-9 . _ -`",
            pattern = r"^[A-Za-z0-9._-]{1,64}$")),
    responses(
        (status = 200, description = "The store's settings (a null field is its default), its actions in \
         flight and its bucket's tokens now.", body = StoreFlowDoc),
        (status = 400, description = "A bad store name (`bad_store`).", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token: settings need an admin token (`admin_only`).", body = ErrorDoc),
        (status = 404, description = "No store has this name: it was never configured and never had an action enqueued.", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn store_get(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    admin_only(&caller, "settings")?;
    let store = flow_name("store", "bad_store", name)?;
    match state.store.store_flow(&store).await? {
        Some(flow) => Ok(Json(flow).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no store {store:?}"),
        )),
    }
}

/// The configured stores (`GET /v1/stores`).
#[derive(Debug, Serialize)]
struct StoreFlowList {
    stores: Vec<StoreFlow>,
    truncated: bool,
}

/// List the configured stores (operators only).
#[utoipa::path(
    get,
    path = "/v1/stores",
    tag = "settings",
    responses(
        (status = 200, description = "The stores with a rate or an in-flight cap set, by name, at most 1,000 \
         (`truncated`: there are more).", body = StoreFlowListDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token: settings need an admin token (`admin_only`).", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn stores_list(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    admin_only(&caller, "settings")?;
    let mut stores = state
        .store
        .stores_configured(STORES_LISTED_MAX as i64 + 1)
        .await?;
    let truncated = stores.len() > STORES_LISTED_MAX;
    stores.truncate(STORES_LISTED_MAX);
    Ok(Json(StoreFlowList { stores, truncated }).into_response())
}

/// Set a provider's ceiling (operators only).
#[utoipa::path(
    put,
    path = "/v1/providers/{name}",
    tag = "settings",
    params(("name" = String, Path, description = "The provider's gate, as workers name it \
            (`courier worker --provider-gate`): 1 to 64 of `A-Z a-z 0-9 . _ -`",
            pattern = r"^[A-Za-z0-9._-]{1,64}$")),
    request_body(content = ProviderSettingsDoc, content_type = "application/json"),
    responses(
        (status = 200, description = "Set: both fields are replaced (one left out or null goes back to its \
         default), the gate is made if there was none, and an `events` row (`provider_settings`) records \
         the token's name and the old and new values. A pause in force stays.", body = ProviderFlowDoc),
        (status = 400, description = "Not a JSON object, malformed JSON, a bad name (`bad_provider`, `field`: \
         `provider`), or a field unknown or out of its bounds, or a `burst` without a `rate_per_s` \
         (`bad_settings`, `field` names it); nothing changed.", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token: settings need an admin token (`admin_only`).", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 413, description = "The body is larger than the payload limit.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry (setting the same values again is harmless).", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn provider_put(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    admin_only(&caller, "settings")?;
    let provider = flow_name("provider", "bad_provider", name)?;
    let settings: ProviderSettings = settings_body(&body_or_error(body)?)?;
    settings.validate().map_err(settings_refused)?;
    let flow = state
        .store
        .provider_configure(&provider, &settings, caller.name())
        .await
        .map_err(flow_refused)?;
    Ok(Json(flow).into_response())
}

/// Read a provider's gate (operators only).
#[utoipa::path(
    get,
    path = "/v1/providers/{name}",
    tag = "settings",
    params(("name" = String, Path, description = "The provider's gate, as workers name it \
            (`courier worker --provider-gate`): 1 to 64 of `A-Z a-z 0-9 . _ -`",
            pattern = r"^[A-Za-z0-9._-]{1,64}$")),
    responses(
        (status = 200, description = "The gate: its ceiling (a null field is its default), its bucket's \
         tokens now, its pause and how many pauses it has had.", body = ProviderFlowDoc),
        (status = 400, description = "A bad name (`bad_provider`).", body = ErrorDoc),
        (status = 401, description = "No valid token: none, not `Bearer <token>`, or one never issued, revoked or wrong.", body = ErrorDoc),
        (status = 403, description = "A store token: settings need an admin token (`admin_only`).", body = ErrorDoc),
        (status = 404, description = "No gate has this name: it was never given a ceiling and never paused.", body = ErrorDoc),
        (status = 408, description = "The request took longer than the server's request time-out.", body = ErrorDoc),
        (status = 503, description = "The database is unavailable; retry.", body = ErrorDoc),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn provider_get(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    admin_only(&caller, "settings")?;
    let provider = flow_name("provider", "bad_provider", name)?;
    match state.store.provider_flow(&provider).await? {
        Some(flow) => Ok(Json(flow).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no provider gate {provider:?}"),
        )),
    }
}
