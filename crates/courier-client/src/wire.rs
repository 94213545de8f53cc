//! What the API takes and answers, as the OpenAPI document names them
//! (`EnqueueRequest`, `Action`, `EnqueuedItem`, `StoreFlow`,
//! `StoreFlowList`, `ProviderFlow`, `Error`). The client reads
//! answers leniently: a field it does not know is ignored, so a server with
//! more to say does not turn a success into an unknown outcome.

use chrono::{DateTime, Utc};
use courier_core::rate::{ProviderSettings, StoreSettings};
use courier_core::{ActionState, Status};
use serde::{Deserialize, Deserializer, Serialize};

/// One action to enqueue: the body of `POST /v1/actions`, and one item of a
/// batch. The server checks every field (`courier.enqueue_problem`); a field
/// out of its limits is [`crate::ClientError::Refused`] naming it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueRequest {
    /// The tenant: 1 to 64 of `A-Z a-z 0-9 . _ -`.
    pub store: String,
    /// The recipient in E.164 form (`+15551234567`).
    pub to: String,
    /// The text, 1 to 1,600 characters, without NUL.
    pub body: String,
    /// The idempotency key within the store. Without one, an unknown outcome
    /// cannot be retried safely: a retry may enqueue a second action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Not sent before this time: the action is `scheduled` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<DateTime<Utc>>,
    /// Never sent after this time: an action not sent by then ends
    /// `expired`. The server refuses one already past or before
    /// `not_before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

impl EnqueueRequest {
    /// A request with the idempotency key `key`, due at once, with no
    /// deadline.
    pub fn new(
        store: impl Into<String>,
        to: impl Into<String>,
        body: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        EnqueueRequest {
            store: store.into(),
            to: to.into(),
            body: body.into(),
            key: Some(key.into()),
            not_before: None,
            expires_at: None,
        }
    }

    /// The same request, not sent before `at`.
    pub fn with_not_before(mut self, at: DateTime<Utc>) -> Self {
        self.not_before = Some(at);
        self
    }

    /// The same request, never sent after `at`.
    pub fn with_expires_at(mut self, at: DateTime<Utc>) -> Self {
        self.expires_at = Some(at);
        self
    }
}

/// An action as the API shows it (the document's `Action`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    pub id: i64,
    pub store: String,
    /// The client's key, if one was given.
    pub key: Option<String>,
    pub to: String,
    pub state: ActionState,
    /// The fencing token: +1 at every claim.
    pub epoch: i64,
    /// `None` until the intent is written.
    pub status: Option<Status>,
    /// The key every request to the provider carries (`courier-<uid>`).
    pub idempotency_key: Option<String>,
    pub attempts: i32,
    pub message_id: Option<String>,
    pub fail_reason: Option<String>,
    /// UTC, RFC 3339 with milliseconds.
    pub enqueued_at: String,
    /// Not sent before this time (UTC, RFC 3339 with milliseconds).
    #[serde(default)]
    pub not_before: Option<String>,
    /// Never sent after this time (UTC, RFC 3339 with milliseconds).
    #[serde(default)]
    pub expires_at: Option<String>,
    /// The action this one re-drives.
    #[serde(default)]
    pub redrive_of: Option<i64>,
    /// The action that re-drove this one.
    #[serde(default)]
    pub redriven_as: Option<i64>,
}

/// The answer to an enqueue the server took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// 201: this request created the action.
    Created(Action),
    /// 200: the same `(store, key)` and content was enqueued before and is
    /// still kept; this is that action, and nothing new was created.
    Repeat(Action),
}

impl Enqueued {
    pub fn action(&self) -> &Action {
        match self {
            Enqueued::Created(a) | Enqueued::Repeat(a) => a,
        }
    }

    pub fn into_action(self) -> Action {
        match self {
            Enqueued::Created(a) | Enqueued::Repeat(a) => a,
        }
    }

    pub fn created(&self) -> bool {
        matches!(self, Enqueued::Created(_))
    }
}

/// One action of a batch's answer, in the request's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueuedItem {
    pub id: i64,
    /// False for a repeat of a kept action or of an earlier item of the same
    /// batch.
    pub created: bool,
}

/// A store's settings as they stand, and what its bucket and its slots
/// hold now (the document's `StoreFlow`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreFlow {
    pub store: String,
    /// What is in force; a `None` field is its default.
    #[serde(deserialize_with = "store_settings_seen")]
    pub settings: StoreSettings,
    /// The store's actions in flight now, as the claims count them.
    pub in_flight: i32,
    /// Sends its bucket allows now (`None`: no rate).
    pub tokens: Option<f64>,
    /// When an operator last set its settings (`None`: never).
    pub configured_at: Option<DateTime<Utc>>,
}

/// The configured stores (the document's `StoreFlowList`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreFlowList {
    /// The stores with a rate or an in-flight cap set, by name.
    pub stores: Vec<StoreFlow>,
    /// More stores are configured than listed.
    pub truncated: bool,
}

/// A provider's gate as it stands (the document's `ProviderFlow`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderFlow {
    pub provider: String,
    /// The ceiling in force; a `None` field is its default.
    #[serde(deserialize_with = "provider_settings_seen")]
    pub settings: ProviderSettings,
    /// Sends its bucket allows now (`None`: no ceiling).
    pub tokens: Option<f64>,
    /// Milliseconds its pause still lasts (`None`: not paused).
    pub paused_ms: Option<u64>,
    /// Pauses begun or lengthened since the gate was made.
    pub pauses: i64,
    /// When an operator last set its ceiling (`None`: never).
    pub configured_at: Option<DateTime<Utc>>,
}

/// Settings as an answer shows them: read leniently (the settings types of
/// `courier_core::rate` refuse unknown fields, as a request must).
#[derive(Deserialize)]
struct SettingsSeen {
    #[serde(default)]
    rate_per_s: Option<f64>,
    #[serde(default)]
    burst: Option<u32>,
    #[serde(default)]
    in_flight_max: Option<u32>,
}

fn store_settings_seen<'de, D: Deserializer<'de>>(d: D) -> Result<StoreSettings, D::Error> {
    let s = SettingsSeen::deserialize(d)?;
    Ok(StoreSettings {
        rate_per_s: s.rate_per_s,
        burst: s.burst,
        in_flight_max: s.in_flight_max,
    })
}

fn provider_settings_seen<'de, D: Deserializer<'de>>(d: D) -> Result<ProviderSettings, D::Error> {
    let s = SettingsSeen::deserialize(d)?;
    Ok(ProviderSettings {
        rate_per_s: s.rate_per_s,
        burst: s.burst,
    })
}

/// The body of `POST /v1/actions:batch`.
#[derive(Serialize)]
pub(crate) struct BatchRequest<'a> {
    pub actions: &'a [EnqueueRequest],
}

/// The answer to a batch.
#[derive(Deserialize)]
pub(crate) struct BatchAnswer {
    pub actions: Vec<EnqueuedItem>,
}

/// Every error answer of the API: `{"error", "message", "field"?, "index"?}`.
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    pub error: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub field: Option<String>,
    #[serde(default)]
    pub index: Option<usize>,
}
