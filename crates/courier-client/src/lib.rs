//! A typed client of the courier's HTTP API (`courier serve`, described at
//! `/openapi.json`): enqueue one action or a batch, read an action, and
//! cancel one; with an admin token, set and read a store's flow-control
//! settings and a provider's ceiling.
//!
//! Answers are classified by what the caller does next, as the provider
//! client classifies the provider's (`courier_provider::client`):
//!
//! | answer | caller does next |
//! |---|---|
//! | [`Enqueued::Created`] | nothing: the action exists |
//! | [`Enqueued::Repeat`] | nothing: the same `(store, key)` and content was enqueued before; that action |
//! | [`ClientError::Refused`] | fix the request (`reason`, `field`, `index` say what); sending it again gets the same answer |
//! | [`ClientError::Refused`] with status 409, from [`Client::cancel`] | nothing: the action can no longer be cancelled (`reason`: `claimed`, `dispatched` or `final`); wait for its final status |
//! | [`ClientError::Unauthorized`] | fix the token |
//! | [`ClientError::Forbidden`] | use a token that covers the store (`forbidden_store`), or an admin token (`admin_only`: the settings' routes) |
//! | `Ok(None)` from a settings read | nothing: no store, or no provider gate, has this name |
//! | [`ClientError::Unknown`] | send the same request again, with the same key: the action may exist |
//!
//! # Invariants
//! - A time-out, a refused or reset connection, a 408, 409, 429 or 5xx, and
//!   a success whose body cannot be read are [`ClientError::Unknown`], never
//!   a refusal: the enqueue may have committed. With a key, sending the same
//!   request again is safe (the server answers [`Enqueued::Repeat`]).
//! - The one exception is a cancel's 409: the server answers it only after
//!   reading the action's state, and changed nothing. A cancel sent again
//!   after an unknown outcome may find the action `cancelled` by the first,
//!   which it refuses as `final`: read the action to know.
//! - The token is sent only as `Authorization: Bearer`, marked sensitive,
//!   and never printed (the client's `Debug` says only whether it has one).

mod classify;
mod wire;

pub use classify::{
    classify_batch, classify_cancel, classify_enqueue, classify_get, classify_settings,
    classify_settings_get,
};
pub use courier_core::rate::{ProviderSettings, StoreSettings};
pub use wire::{
    Action, EnqueueRequest, Enqueued, EnqueuedItem, ProviderFlow, StoreFlow, StoreFlowList,
};

use reqwest::header::{HeaderValue, AUTHORIZATION};
use std::time::Duration;

/// The longest one request may take, connecting included, unless
/// [`Client::with_timeout`] says otherwise.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// Every answer that is not a success, by what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// A definite no: the server refused this request and changed nothing.
    /// `reason` is the API's error code (`bad_phone`, `key_reused`,
    /// `bad_settings`, ...; `http_<status>` when the answer was not the
    /// API's JSON error). Also a settings call the client refuses without
    /// sending it, as status 400: settings out of their bounds
    /// (`bad_settings`; the server's own check, `courier_core::rate`, which
    /// also catches a rate JSON cannot carry, such as an infinite one), or a
    /// store or a provider named `.` or `..`, which a URL cannot carry
    /// (`bad_store`, `bad_provider`).
    #[error("refused with {status} {reason}{}: {message}", place(.field.as_deref(), *.index))]
    Refused {
        status: u16,
        reason: String,
        message: String,
        /// The request's field at fault (`store`, `to`, `body`, `key`,
        /// `actions`), when the server named one.
        field: Option<String>,
        /// The item of a batch at fault (0-based), when the server named one.
        index: Option<usize>,
    },
    /// 401: no token was sent, or not one the server accepts. Nothing changed.
    #[error("unauthorized: {message}")]
    Unauthorized { message: String },
    /// 403: the token is valid but does not cover this store
    /// (`forbidden_store`), or the route needs an admin token
    /// (`admin_only`). Nothing changed.
    #[error("forbidden ({reason}): {message}")]
    Forbidden { reason: String, message: String },
    /// Nothing is known: the request may or may not have taken effect. Send
    /// the same request again (an enqueue with the same key).
    #[error("outcome unknown ({0}); send the same request again, with the same key")]
    Unknown(String),
}

impl ClientError {
    /// Whether the outcome is unknown, so the same request should be sent
    /// again.
    pub fn is_unknown(&self) -> bool {
        matches!(self, ClientError::Unknown(_))
    }
}

/// " at actions[3].to", " at to", " at actions[3]", or nothing.
fn place(field: Option<&str>, index: Option<usize>) -> String {
    match (index, field) {
        (Some(i), Some(f)) => format!(" at actions[{i}].{f}"),
        (Some(i), None) => format!(" at actions[{i}]"),
        (None, Some(f)) => format!(" at {f}"),
        (None, None) => String::new(),
    }
}

/// The client could not be built from what it was given.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the courier client: {0}")]
pub struct BuildError(String);

/// A client of one courier server. Cheap to clone: clones share one
/// connection pool.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// Without a trailing slash.
    base_url: String,
    /// The same, parsed.
    base: reqwest::Url,
    /// `Bearer <token>`, marked sensitive.
    auth: Option<HeaderValue>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("token", &self.auth.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Client {
    /// A client of the server at `base_url` (`http://host:port`), sending
    /// `token` as a bearer token when given, with requests given up after
    /// [`REQUEST_TIMEOUT_MS_DEFAULT`].
    pub fn new(base_url: impl Into<String>, token: Option<String>) -> Result<Client, BuildError> {
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS_DEFAULT);
        Client::with_timeout(base_url, token, timeout)
    }

    /// As [`Client::new`], with requests given up after `timeout`
    /// (connecting included); a request given up is
    /// [`ClientError::Unknown`].
    pub fn with_timeout(
        base_url: impl Into<String>,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Client, BuildError> {
        let base_url = base_url.into().trim_end_matches('/').to_string();
        let url = reqwest::Url::parse(&base_url)
            .map_err(|e| BuildError(format!("base URL {base_url:?}: {e}")))?;
        // This build of reqwest has no TLS (the workspace pins it without
        // default features): an https URL would fail at every request, and
        // each failure would read as an unknown outcome, retried forever.
        if url.scheme() != "http" {
            return Err(BuildError(format!(
                "base URL {base_url:?}: only http:// is supported"
            )));
        }
        let auth = match token {
            None => None,
            Some(t) if t.is_empty() => return Err(BuildError("the token is empty".into())),
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}"))
                    .map_err(|_| BuildError("the token must be visible ASCII characters".into()))?;
                v.set_sensitive(true);
                Some(v)
            }
        };
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| BuildError(e.to_string()))?;
        Ok(Client {
            http,
            base_url,
            base: url,
            auth,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `POST /v1/actions`: enqueues one action.
    pub async fn enqueue(&self, req: &EnqueueRequest) -> Result<Enqueued, ClientError> {
        let post = self.http.post(self.url("/v1/actions")).json(req);
        let (status, body) = self.exchange(post).await?;
        classify_enqueue(status, &body)
    }

    /// `POST /v1/actions:batch`: enqueues every action in one transaction,
    /// all or nothing. The answer is in the request's order.
    pub async fn enqueue_batch(
        &self,
        reqs: &[EnqueueRequest],
    ) -> Result<Vec<EnqueuedItem>, ClientError> {
        let post = self
            .http
            .post(self.url("/v1/actions:batch"))
            .json(&wire::BatchRequest { actions: reqs });
        let (status, body) = self.exchange(post).await?;
        classify_batch(status, &body, reqs.len())
    }

    /// `GET /v1/actions/{id}`: the action, or `None` when the server has no
    /// action with this id that the token may read.
    pub async fn get(&self, id: i64) -> Result<Option<Action>, ClientError> {
        let get = self.http.get(self.url(&format!("/v1/actions/{id}")));
        let (status, body) = self.exchange(get).await?;
        classify_get(status, &body)
    }

    /// `POST /v1/actions/{id}/cancel`: cancels an action no worker holds.
    /// The cancelled action, or `None` when the server has no action with
    /// this id that the token may cancel; a 409 is
    /// [`ClientError::Refused`] with the reason (`claimed`, `dispatched`,
    /// `final`) and nothing changed.
    pub async fn cancel(&self, id: i64) -> Result<Option<Action>, ClientError> {
        let post = self
            .http
            .post(self.url(&format!("/v1/actions/{id}/cancel")));
        let (status, body) = self.exchange(post).await?;
        classify_cancel(status, &body)
    }

    /// `PUT /v1/stores/{store}` (admin token): sets a store's rate, burst
    /// and in-flight cap, replacing all three (a `None` field goes back to
    /// its default); the store is created if it was never seen. Answers the
    /// settings as they now stand. A refused field is
    /// [`ClientError::Refused`] with `bad_settings` and the field's name.
    pub async fn store_settings_put(
        &self,
        store: &str,
        settings: &StoreSettings,
    ) -> Result<StoreFlow, ClientError> {
        let url = self.named_url("store", &["v1", "stores"], store)?;
        settings.validate().map_err(settings_refused)?;
        let (status, body) = self.exchange(self.http.put(url).json(settings)).await?;
        classify_settings(status, &body)
    }

    /// `GET /v1/stores/{store}` (admin token): a store's settings and
    /// state, or `None` when no store has this name.
    pub async fn store_settings_get(&self, store: &str) -> Result<Option<StoreFlow>, ClientError> {
        let url = self.named_url("store", &["v1", "stores"], store)?;
        let (status, body) = self.exchange(self.http.get(url)).await?;
        classify_settings_get(status, &body)
    }

    /// `GET /v1/stores` (admin token): the stores with a rate or an
    /// in-flight cap set, by name, as many as the server lists.
    pub async fn stores_configured(&self) -> Result<StoreFlowList, ClientError> {
        let get = self.http.get(self.url("/v1/stores"));
        let (status, body) = self.exchange(get).await?;
        classify_settings(status, &body)
    }

    /// `PUT /v1/providers/{name}` (admin token): sets the ceiling of the
    /// provider gate `name` (as workers name it, `courier worker
    /// --provider-gate`), replacing it. Answers the gate as it now stands.
    pub async fn provider_settings_put(
        &self,
        name: &str,
        settings: &ProviderSettings,
    ) -> Result<ProviderFlow, ClientError> {
        let url = self.named_url("provider", &["v1", "providers"], name)?;
        settings.validate().map_err(settings_refused)?;
        let (status, body) = self.exchange(self.http.put(url).json(settings)).await?;
        classify_settings(status, &body)
    }

    /// `GET /v1/providers/{name}` (admin token): the gate's ceiling, tokens
    /// and pause, or `None` when no gate has this name.
    pub async fn provider_settings_get(
        &self,
        name: &str,
    ) -> Result<Option<ProviderFlow>, ClientError> {
        let url = self.named_url("provider", &["v1", "providers"], name)?;
        let (status, body) = self.exchange(self.http.get(url)).await?;
        classify_settings_get(status, &body)
    }

    /// The URL of `route` and then `name` below the base URL, `name`
    /// percent-encoded as one path segment. A URL's parser removes a
    /// segment `.` or `..`, so such a name is refused here (`bad_<field>`)
    /// and nothing is sent.
    fn named_url(
        &self,
        field: &str,
        route: &[&str],
        name: &str,
    ) -> Result<reqwest::Url, ClientError> {
        if matches!(name, "." | "..") {
            return Err(ClientError::Refused {
                status: 400,
                reason: format!("bad_{field}"),
                message: format!(
                    "a {field} named {name:?} cannot be named in a URL; nothing was sent"
                ),
                field: Some(field.to_string()),
                index: None,
            });
        }
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http:// URL (checked when the client was built) has a path")
            .pop_if_empty()
            .extend(route)
            .push(name);
        Ok(url)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Sends `req` with the token and reads the whole answer; a failure to
    /// do either is [`ClientError::Unknown`].
    async fn exchange(
        &self,
        mut req: reqwest::RequestBuilder,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| ClientError::Unknown(describe(&e)))?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(|e| {
            ClientError::Unknown(format!("answer {status} cut off: {}", describe(&e)))
        })?;
        Ok((status, body.to_vec()))
    }
}

/// A request the client refuses without sending it (see
/// [`ClientError::Refused`]).
fn not_sent(reason: String, field: &str, message: String) -> ClientError {
    ClientError::Refused {
        status: 400,
        reason,
        message: format!("{message}; nothing was sent"),
        field: Some(field.to_string()),
        index: None,
    }
}

fn settings_refused(e: courier_core::rate::SettingsError) -> ClientError {
    not_sent("bad_settings".to_string(), e.field, e.to_string())
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("time-out: {e}")
    } else if e.is_connect() {
        format!("connection failed: {e}")
    } else {
        format!("transport error: {e}")
    }
}
