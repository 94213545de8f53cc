//! Telnyx's client: the [`Provider`] a worker runs at tier `c`.

use super::wire::{classify_send, webhook_url, SendBody};
use super::NAME;
use crate::settings::{Settings, SettingsError};
use courier_provider::{retry_after_ms, LookupOutcome, Provider, SendOutcome};
use reqwest::header::{HeaderValue, AUTHORIZATION};
use std::fmt;
use std::time::Duration;

/// Sends through `POST {base_url}/v2/messages`. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    messages_url: String,
    /// `Bearer <TELNYX_API_KEY>`, marked sensitive.
    auth: HeaderValue,
    from: String,
    /// courier's webhook route; each send adds its key to the query.
    callback_base: Option<String>,
}

impl Client {
    /// A client from `TELNYX_API_KEY` and `TELNYX_FROM`; `base_url` is
    /// [`super::BASE_URL`] but for a double; `callback_base` is the public
    /// URL of courier's Telnyx webhook route (`None`: no webhooks asked,
    /// so an unknown outcome stays held until an operator resolves it);
    /// `timeout` bounds one request, connect included.
    pub fn new(
        settings: &Settings,
        base_url: &str,
        callback_base: Option<&str>,
        timeout: Duration,
    ) -> Result<Client, SettingsError> {
        let invalid = |name: &str, why: String| SettingsError::Invalid {
            provider: NAME,
            name: name.to_string(),
            why,
        };
        let api_key = settings.required(NAME, "TELNYX_API_KEY")?;
        let from = settings.required(NAME, "TELNYX_FROM")?.expose().to_string();
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", api_key.expose()))
            .map_err(|_| invalid("TELNYX_API_KEY", "not a valid header value".into()))?;
        auth.set_sensitive(true);
        let http = crate::settings::http_client(NAME, timeout)?;
        Ok(Client {
            http,
            messages_url: format!("{}/v2/messages", base_url.trim_end_matches('/')),
            auth,
            from,
            callback_base: callback_base.map(str::to_string),
        })
    }

    /// The body of a send of `key`.
    fn body(&self, key: &str, to: &str, text: &str) -> SendBody {
        let url = self.callback_base.as_deref().map(|b| webhook_url(b, key));
        SendBody::new(&self.from, to, text, url)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("messages_url", &self.messages_url)
            .field("auth", &"<redacted>")
            .field("from", &self.from)
            .field("callback_base", &self.callback_base)
            .finish()
    }
}

impl Provider for Client {
    async fn send(&self, key: &str, to: &str, body: &str) -> SendOutcome {
        let result = self
            .http
            .post(&self.messages_url)
            .header(AUTHORIZATION, self.auth.clone())
            .json(&self.body(key, to, body))
            .send()
            .await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => return SendOutcome::Unknown(describe(&e)),
        };
        let status = resp.status().as_u16();
        let retry_after = retry_after_ms(resp.headers(), std::time::SystemTime::now());
        match resp.bytes().await {
            Ok(bytes) => classify_send(status, &bytes, key).with_retry_after(retry_after),
            Err(e) => SendOutcome::Unknown(format!("answer {status} cut off: {}", describe(&e))),
        }
    }

    /// Telnyx finds a message only by its own id, which an unknown outcome
    /// does not give: there is nothing to ask.
    async fn lookup(&self, _key: &str) -> LookupOutcome {
        LookupOutcome::Unknown("telnyx has no lookup by courier's key".to_string())
    }
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
