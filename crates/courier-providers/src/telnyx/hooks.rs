//! Telnyx's status webhooks: verified, then read as a [`Report`].
//!
//! An event is `{"data": {"event_type", "id", "occurred_at", "payload",
//! "record_type": "event"}, "meta": {...}}` (spec `OutboundMessageEvent`).
//! courier reads `message.sent` and `message.finalized`: the event's id
//! (`data.id`, one per event, the merge's duplicate check), the message's
//! (`data.payload.id`), its status (`data.payload.to[0].status`) and the
//! key, from the query of `data.payload.webhook_url`.
//!
//! The key is read from the signed body only. The request line (the URL
//! Telnyx called) is not signed, so it is not read at all: a key there that
//! disagrees with the body's changes nothing, and refusing on it would add
//! no protection (whoever could change the line could not change the body).

use super::signature::{verify, PublicKey, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use super::wire::{key_of_url, map_status, Recipient};
use super::NAME;
use crate::inbound::{Inbound, Parsed, Refusal, Report, Webhooks};
use crate::settings::{Settings, SettingsError};
use courier_core::key::validate_key;
use serde::Deserialize;

/// The setting of the account's public key.
const PUBLIC_KEY_SETTING: &str = "TELNYX_PUBLIC_KEY";

/// Telnyx's webhook scheme, with the account's public key.
#[derive(Debug, Clone)]
pub struct Hooks {
    key: PublicKey,
}

impl Hooks {
    /// From `TELNYX_PUBLIC_KEY` (base64 of 32 bytes): missing or not such a
    /// key is a settings error.
    pub fn new(settings: &Settings) -> Result<Hooks, SettingsError> {
        let raw = settings.required(NAME, PUBLIC_KEY_SETTING)?;
        Hooks::from_public_key(raw.expose())
    }

    /// From the public key itself (base64).
    pub fn from_public_key(base64: &str) -> Result<Hooks, SettingsError> {
        PublicKey::from_base64(base64)
            .map(|key| Hooks { key })
            .map_err(|why| SettingsError::Invalid {
                provider: NAME,
                name: PUBLIC_KEY_SETTING.to_string(),
                why,
            })
    }
}

impl Webhooks for Hooks {
    fn receive(&self, inbound: &Inbound<'_>) -> Result<Parsed, Refusal> {
        verify(
            &self.key,
            inbound.header(SIGNATURE_HEADER),
            inbound.header(TIMESTAMP_HEADER),
            inbound.body,
            inbound.now_s,
        )?;
        read_event(inbound.body)
    }
}

#[derive(Deserialize)]
struct Event {
    data: EventData,
}

#[derive(Deserialize)]
struct EventData {
    event_type: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    payload: Option<Payload>,
}

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    to: Option<Vec<Recipient>>,
    #[serde(default)]
    webhook_url: Option<String>,
}

/// The event types that report an outbound message's status.
const TRACKED_EVENTS: [&str; 2] = ["message.sent", "message.finalized"];

/// A verified event's content: a report, or ignored (another event type,
/// such as `message.received`, or a status courier does not track).
/// Malformed: not JSON of an event, or a tracked event without an event
/// id, a message id, a recipient's status, or a valid key in its
/// `webhook_url`.
pub fn read_event(body: &[u8]) -> Result<Parsed, Refusal> {
    let event: Event = serde_json::from_slice(body)
        .map_err(|e| Refusal::Malformed(format!("not a Telnyx event: {e}")))?;
    let data = event.data;
    if !TRACKED_EVENTS.contains(&data.event_type.as_str()) {
        return Ok(Parsed::Ignored(format!(
            "telnyx event {:?} reports no outbound status",
            data.event_type
        )));
    }
    let missing = |what: &str| Refusal::Malformed(format!("{} without {what}", data.event_type));
    let event_id = data
        .id
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| missing("data.id"))?;
    let payload = data
        .payload
        .as_ref()
        .ok_or_else(|| missing("data.payload"))?;
    let message_id = payload
        .id
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| missing("data.payload.id"))?;
    let key = payload
        .webhook_url
        .as_deref()
        .and_then(key_of_url)
        .ok_or_else(|| missing("courier's key in data.payload.webhook_url"))?;
    validate_key(&key).map_err(|e| Refusal::Malformed(format!("the key in webhook_url: {e}")))?;
    let status = payload
        .to
        .as_deref()
        .and_then(|to| to.first())
        .and_then(|r| r.status.as_deref())
        .ok_or_else(|| missing("data.payload.to[0].status"))?;
    let Some(status) = map_status(status) else {
        return Ok(Parsed::Ignored(format!(
            "telnyx status {status:?} is not one courier tracks"
        )));
    };
    Ok(Parsed::Report(Report {
        key,
        status,
        event_id,
        message_id,
    }))
}
