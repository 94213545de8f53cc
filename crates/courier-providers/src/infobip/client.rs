//! The Infobip client a worker runs: send with courier's key as the
//! `messageId`, and, at tier `a` only, a lookup in the message logs.

use super::wire::{classify_lookup, classify_send, send_body};
use super::{idempotency_window_s, notify_url, tier, API_KEY, FROM, NAME, WEBHOOK_SECRET};
use crate::inbound::percent_encode;
use crate::settings::{Secret, Settings, SettingsError};
use courier_core::Tier;
use courier_provider::{retry_after_ms, LookupOutcome, Provider, SendOutcome};
use std::fmt;
use std::time::Duration;

/// Infobip's SMS API v3 as a [`Provider`]. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base_url: String,
    /// `App <INFOBIP_API_KEY>`.
    auth: Secret,
    sender: String,
    /// courier's callback and the secret of its tokens; `None`: no delivery
    /// reports are asked for.
    callback: Option<(String, Secret)>,
    tier: Tier,
}

impl Client {
    /// `base_url`: the account's API base (`https://xxxxx.api.infobip.com`);
    /// `callback_base`: courier's webhook URL for Infobip, to which each
    /// message's key and token are added (then `INFOBIP_WEBHOOK_SECRET` is
    /// required); `timeout`: of one request, connect included.
    pub fn new(
        settings: &Settings,
        base_url: &str,
        callback_base: Option<&str>,
        timeout: Duration,
    ) -> Result<Client, SettingsError> {
        let key = settings.required(NAME, API_KEY)?;
        let sender = settings.required(NAME, FROM)?.expose().to_string();
        let callback = match callback_base {
            Some(base) => Some((
                base.to_string(),
                settings.required(NAME, WEBHOOK_SECRET)?.clone(),
            )),
            None => None,
        };
        // Refuses a value of INFOBIP_IDEMPOTENT other than on/off, and `on`
        // without a grace period.
        idempotency_window_s(settings)?;
        let http = crate::settings::http_client(NAME, timeout)?;
        Ok(Client {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            auth: Secret::new(format!("App {}", key.expose())),
            sender,
            callback,
            tier: tier(settings),
        })
    }

    /// The tier these settings run at ([`super::tier`]).
    pub fn tier(&self) -> Tier {
        self.tier
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("infobip::Client")
            .field("base_url", &self.base_url)
            .field("sender", &self.sender)
            .field("callback", &self.callback.as_ref().map(|(base, _)| base))
            .field("tier", &self.tier)
            .finish_non_exhaustive()
    }
}

impl Provider for Client {
    async fn send(&self, key: &str, to: &str, body: &str) -> SendOutcome {
        let url = self
            .callback
            .as_ref()
            .map(|(base, secret)| notify_url(base, key, secret.expose().as_bytes()));
        let request = send_body(&self.sender, key, to, body, url.as_deref());
        let result = self
            .http
            .post(format!("{}/sms/3/messages", self.base_url))
            .header("authorization", self.auth.expose())
            .header("accept", "application/json")
            .json(&request)
            .send()
            .await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => return SendOutcome::Unknown(describe(e)),
        };
        let status = resp.status().as_u16();
        let retry_after = retry_after_ms(resp.headers(), std::time::SystemTime::now());
        match resp.bytes().await {
            Ok(bytes) => classify_send(status, &bytes, key).with_retry_after(retry_after),
            Err(e) => SendOutcome::Unknown(format!("answer {status} cut off: {}", describe(e))),
        }
    }

    async fn lookup(&self, key: &str) -> LookupOutcome {
        if self.tier != Tier::A {
            // Without idempotency the logs' lag is not stated: a "not
            // found" could not be trusted, so nothing is asked.
            return LookupOutcome::Unknown(format!(
                "infobip at tier {}: no lookup (INFOBIP_IDEMPOTENT is not on)",
                self.tier
            ));
        }
        let result = self
            .http
            .get(format!(
                "{}/sms/3/logs?messageId={}",
                self.base_url,
                percent_encode(key)
            ))
            .header("authorization", self.auth.expose())
            .header("accept", "application/json")
            .send()
            .await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => return LookupOutcome::Unknown(describe(e)),
        };
        let status = resp.status().as_u16();
        match resp.bytes().await {
            Ok(bytes) => classify_lookup(status, &bytes, key),
            Err(e) => LookupOutcome::Unknown(format!("answer {status} cut off: {}", describe(e))),
        }
    }
}

/// A transport error, without its URL (the lookup's names the key).
fn describe(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "time-out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "transport error"
    };
    format!("{kind}: {}", e.without_url())
}
