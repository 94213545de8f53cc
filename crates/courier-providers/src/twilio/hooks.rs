//! Twilio's status callbacks, verified and read.

use super::signature::{self, HEADER};
use super::wire::map_status;
use super::NAME;
use crate::inbound::{form_pairs, Inbound, Parsed, Refusal, Report, Webhooks};
use crate::settings::{Secret, Settings, SettingsError};
use courier_core::key::validate_key;

/// Checks `X-Twilio-Signature` with the account's auth token, then reads
/// `MessageSid` and `MessageStatus` from the form and courier's key from
/// the signed URL's query (`key`).
///
/// The event id is `{MessageSid}:{MessageStatus}`, Twilio's own status
/// (`delivered` and `read` are two events, both courier's `delivered`), so
/// a callback Twilio retries, or one replayed, merges once.
#[derive(Debug, Clone)]
pub struct Hooks {
    auth_token: Secret,
}

impl Hooks {
    /// Needs `TWILIO_AUTH_TOKEN`, the key Twilio signs callbacks with.
    pub fn new(settings: &Settings) -> Result<Hooks, SettingsError> {
        let auth_token = settings.required(NAME, "TWILIO_AUTH_TOKEN")?.clone();
        if auth_token.expose().is_empty() {
            return Err(SettingsError::Invalid {
                provider: NAME,
                name: "TWILIO_AUTH_TOKEN".into(),
                why: "it is empty".into(),
            });
        }
        Ok(Hooks { auth_token })
    }
}

impl Webhooks for Hooks {
    fn receive(&self, inbound: &Inbound<'_>) -> Result<Parsed, Refusal> {
        let Some(given) = inbound.header(HEADER) else {
            return Err(Refusal::Unsigned);
        };
        let params = form_pairs(inbound.body);
        if !signature::verify(self.auth_token.expose(), inbound.url, &params, given) {
            return Err(Refusal::Forged);
        }
        let key = inbound
            .query("key")
            .ok_or_else(|| Refusal::Malformed("the callback URL has no key".into()))?;
        validate_key(&key)
            .map_err(|e| Refusal::Malformed(format!("the callback URL's key: {e}")))?;
        let field = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| Refusal::Malformed(format!("no {name}")))
        };
        let sid = field("MessageSid")?;
        let twilio_status = field("MessageStatus")?;
        let Some(status) = map_status(twilio_status) else {
            return Ok(Parsed::Ignored(format!(
                "twilio status {twilio_status:?} is not one courier tracks"
            )));
        };
        Ok(Parsed::Report(Report {
            key,
            status,
            event_id: format!("{sid}:{twilio_status}"),
            message_id: sid.to_string(),
        }))
    }
}
