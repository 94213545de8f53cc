//! Infobip (SMS API v3): tier `a` once Infobip has enabled idempotent
//! sending on the account, tier `c` until then (`docs/providers.md`,
//! "Infobip").
//!
//! courier assigns each message's `messageId`: it is the action's key. With
//! idempotency enabled, Infobip rejects a repeat of a `messageId` inside the
//! grace period it configured for the account, and `GET
//! /sms/3/logs?messageId=` finds the message by that key (the last 48 h):
//! the contract's key and lookup, so tier `a`. The operator says so with
//! `INFOBIP_IDEMPOTENT=on` (only once Infobip has confirmed it) and
//! `INFOBIP_IDEMPOTENCY_WINDOW_S`, the grace period Infobip gave, which must
//! be at least courier's `--key-retention-s` ([`check_key_retention`]).
//! Without it there is no deduplication and no stated lag for the logs, so
//! the adapter is tier `c` and never looks anything up ([`tier`]).
//!
//! The parts: [`wire`] (the send body, answers classified by what the
//! caller does next, statuses mapped), [`Hooks`] (delivery reports, checked
//! with courier's own token) and [`Client`] (the [`Provider`] a worker runs).
//!
//! # The rejected repeat (an open question of the reference)
//! Infobip's reference does not say how a rejected repeat is answered. Its
//! status list has `REJECTED_DUPLICATE_MESSAGE_ID` (group `REJECTED`, id 23:
//! "rejected due to a duplicate message ID"), and the idempotency page says
//! repeats are "rejected during processing", so a repeat may be answered
//! `200` with that status, or with `PENDING` and then reported (delivery
//! report, log entry) as that status under the *same* `messageId` as the
//! original. courier's choice, everywhere:
//! - that status is never the message's own: it maps to no courier status
//!   ([`map_status`]), a delivery report carrying it is ignored, a log entry
//!   carrying it is skipped;
//! - a send answered with any status of group `REJECTED` is
//!   [`SendOutcome::Unknown`]: a repeat's rejection (by the duplicate check
//!   or, say, the flooding filter) cannot be told from a new message's, and
//!   failing the action on it could fail one whose original was sent. At
//!   tier `a` the lookup that follows settles it (a log showing only
//!   rejected entries is `failed`); at tier `c` the action is held until a
//!   delivery report or an operator settles it;
//! - a `400` whose body names a duplicate is [`SendOutcome::Unknown`] too;
//!   any other `400` is a definite refusal.
//!
//! # Delivery reports are unsigned
//! Infobip signs no SMS delivery report, so courier puts its own token in
//! the delivery URL it sends: `{callback_base}?key={key}&token={hex
//! HMAC-SHA256(INFOBIP_WEBHOOK_SECRET, key)}` ([`notify_url`]). The token
//! authenticates the key, not the body: anyone who has seen one message's
//! URL can post reports for that one message (serve the callback over
//! HTTPS). The merge is forward-only and a conflict of finals is settled by
//! a lookup, which bounds what such a report can do.
//!
//! # Invariants
//! - The `messageId` of every send is the action's key, so a lookup and
//!   every delivery report name the action.
//! - A lookup answers [`LookupOutcome::NotFound`] only for a `200` whose
//!   `results` is empty; and only a tier-`a` client asks at all.
//! - No status of group `REJECTED` in a send answer ever fails an action.
//! - A delivery report is read only after its token verified, in constant
//!   time, and is merged only for the key the token was made for.
//! - The key never appears in an outcome's text (worker logs print them).
//!
//! [`Provider`]: courier_provider::Provider
//! [`SendOutcome::Unknown`]: courier_provider::SendOutcome::Unknown
//! [`LookupOutcome::NotFound`]: courier_provider::LookupOutcome::NotFound

mod client;
mod hooks;
pub mod wire;

pub use client::Client;
pub use hooks::Hooks;
pub use wire::{
    classify_lookup, classify_send, map_status, send_body, DUPLICATE_STATUS, GROUP_REJECTED,
};

use crate::inbound::percent_encode;
use crate::settings::{Secret, Settings, SettingsError};
use courier_core::{Tier, UnknownPolicy};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The provider's name: `--provider`, the webhook route, the fake's dialect.
pub const NAME: &str = "infobip";

/// `Authorization: App <key>`.
pub const API_KEY: &str = "INFOBIP_API_KEY";
/// The sender (`messages[0].sender`): a number or an alphanumeric ID.
pub const FROM: &str = "INFOBIP_FROM";
/// courier's own secret for the delivery URL's token.
pub const WEBHOOK_SECRET: &str = "INFOBIP_WEBHOOK_SECRET";
/// `on` once Infobip has enabled idempotent sending on the account.
pub const IDEMPOTENT: &str = "INFOBIP_IDEMPOTENT";
/// The grace period Infobip configured, in seconds (with `IDEMPOTENT=on`).
pub const IDEMPOTENCY_WINDOW_S: &str = "INFOBIP_IDEMPOTENCY_WINDOW_S";

/// Every setting the adapter reads.
pub const SETTINGS: &[&str] = &[
    API_KEY,
    FROM,
    WEBHOOK_SECRET,
    IDEMPOTENT,
    IDEMPOTENCY_WINDOW_S,
];

/// The tier these settings allow: `a` only with `INFOBIP_IDEMPOTENT=on`,
/// `c` (hold) otherwise. (A value other than `on` and `off` is refused by
/// [`Client::new`], so a typo cannot quietly run tier `c`.)
pub fn tier(settings: &Settings) -> Tier {
    if settings.optional(IDEMPOTENT).map(Secret::expose) == Some("on") {
        Tier::A
    } else {
        Tier::C(UnknownPolicy::Hold)
    }
}

/// Whether idempotent sending is declared on: `on`, `off` or unset.
fn idempotent(settings: &Settings) -> Result<bool, SettingsError> {
    match settings.optional(IDEMPOTENT).map(Secret::expose) {
        None | Some("off") => Ok(false),
        Some("on") => Ok(true),
        Some(_) => Err(SettingsError::Invalid {
            provider: NAME,
            name: IDEMPOTENT.to_string(),
            why: "must be on (only once Infobip has enabled idempotency on the account) or off"
                .to_string(),
        }),
    }
}

/// The grace period Infobip configured, in seconds: required (and more than
/// zero) with `INFOBIP_IDEMPOTENT=on`; `None` at tier `c`, where it means
/// nothing.
pub fn idempotency_window_s(settings: &Settings) -> Result<Option<u64>, SettingsError> {
    if !idempotent(settings)? {
        return Ok(None);
    }
    let raw = settings.required(NAME, IDEMPOTENCY_WINDOW_S)?.expose();
    match raw.trim().parse::<u64>() {
        Ok(s) if s > 0 => Ok(Some(s)),
        _ => Err(SettingsError::Invalid {
            provider: NAME,
            name: IDEMPOTENCY_WINDOW_S.to_string(),
            why: "must be the grace period Infobip configured, in whole seconds (> 0)".to_string(),
        }),
    }
}

/// How far back Infobip's message logs reach (48 h, docs/providers.md): the
/// lookup of tier `a`.
pub const LOGS_REACH_S: u64 = 48 * 3600;

/// Checks courier's key retention against Infobip's grace period and its
/// logs: a resend after the grace period would be a second message, so
/// courier must forget a key (and stop resending with it) no later than
/// Infobip does; and past the logs' 48 h a lookup cannot find the message.
/// Nothing to check at tier `c`, which never resends.
pub fn check_key_retention(settings: &Settings, key_retention_s: u64) -> Result<(), SettingsError> {
    let Some(window_s) = idempotency_window_s(settings)? else {
        return Ok(());
    };
    let invalid = |name: &str, why: String| SettingsError::Invalid {
        provider: NAME,
        name: name.to_string(),
        why,
    };
    if window_s < key_retention_s {
        return Err(invalid(
            IDEMPOTENCY_WINDOW_S,
            format!(
                "Infobip's grace period ({window_s} s) is shorter than --key-retention-s \
                 ({key_retention_s} s): a resend after it would send a second message"
            ),
        ));
    }
    if key_retention_s > LOGS_REACH_S {
        return Err(invalid(
            "--key-retention-s",
            format!(
                "{key_retention_s} s is longer than the {LOGS_REACH_S} s Infobip's message logs \
                 reach back: a lookup after that answers \"not found\" for a message that exists"
            ),
        ));
    }
    Ok(())
}

/// The token of a key: hex HMAC-SHA256 of the key under courier's secret.
pub fn token(secret: &[u8], key: &str) -> String {
    hex::encode(mac(secret, key).finalize().into_bytes())
}

/// Checks a token against a key, in constant time.
pub(crate) fn token_verifies(secret: &[u8], key: &str, token: &str) -> bool {
    let Ok(given) = hex::decode(token) else {
        return false;
    };
    mac(secret, key).verify_slice(&given).is_ok()
}

fn mac(secret: &[u8], key: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(key.as_bytes());
    mac
}

/// The delivery URL of one message: courier's callback with the key and
/// its token in the query.
pub fn notify_url(callback_base: &str, key: &str, secret: &[u8]) -> String {
    let sep = if callback_base.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{callback_base}{sep}key={}&token={}",
        percent_encode(key),
        token(secret, key)
    )
}
