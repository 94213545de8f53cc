//! The Twilio client: a [`Provider`] a worker runs at tier `c`.

use super::wire::{
    basic_authorization, callback_url, classify_send, encode_form, messages_path, send_params,
    Sender,
};
use super::NAME;
use crate::settings::{Secret, Settings, SettingsError};
use courier_provider::{retry_after_ms, LookupOutcome, Provider, SendOutcome};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use std::fmt;
use std::time::Duration;

/// Sends through `POST {base}/2010-04-01/Accounts/{sid}/Messages.json`
/// (form-encoded, HTTP Basic `AccountSid:AuthToken`), with the action's key
/// in the status callback's query when courier has a callback base.
///
/// The auth token is held as a [`Secret`] and only ever written into the
/// request's `Authorization` header, marked sensitive; no answer or error
/// courier keeps carries it.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The send's endpoint.
    messages_url: String,
    account_sid: String,
    auth_token: Secret,
    sender: Sender,
    /// Where Twilio posts status callbacks (the key is added per send).
    callback_base: Option<String>,
}

impl Client {
    /// Reads `TWILIO_ACCOUNT_SID`, `TWILIO_AUTH_TOKEN` and `TWILIO_FROM`.
    /// `base_url` is Twilio's ([`super::BASE_URL`]) or a double's;
    /// `callback_base` is courier's webhook URL as Twilio should call it
    /// (`https://courier.example/v1/webhooks/twilio`), which Twilio
    /// refuses if it has an underscore; `timeout` bounds one request,
    /// connect included.
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
        let account_sid = settings.required(NAME, "TWILIO_ACCOUNT_SID")?.expose();
        // It is the path's segment and the Basic user, so no ':' or '/'.
        if account_sid.is_empty() || !account_sid.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(invalid(
                "TWILIO_ACCOUNT_SID",
                "must be letters and digits (AC...)".into(),
            ));
        }
        let auth_token = settings.required(NAME, "TWILIO_AUTH_TOKEN")?.clone();
        if auth_token.expose().is_empty() {
            return Err(invalid("TWILIO_AUTH_TOKEN", "it is empty".into()));
        }
        let from = settings.required(NAME, "TWILIO_FROM")?.expose();
        if from.trim().is_empty() {
            return Err(invalid("TWILIO_FROM", "it is empty".into()));
        }
        let base_url = base_url.trim_end_matches('/');
        check_http_url(base_url).map_err(|why| invalid("base URL", why))?;
        if let Some(cb) = callback_base {
            check_http_url(cb).map_err(|why| invalid("status callback URL", why))?;
            if cb.contains('_') {
                return Err(invalid(
                    "status callback URL",
                    "Twilio refuses underscores in a StatusCallback URL".into(),
                ));
            }
        }
        let http = crate::settings::http_client(NAME, timeout)?;
        Ok(Client {
            http,
            messages_url: format!("{base_url}{}", messages_path(account_sid)),
            account_sid: account_sid.to_string(),
            auth_token,
            sender: Sender::parse(from.trim()),
            callback_base: callback_base.map(str::to_string),
        })
    }

    /// The form body of a send (pure: what [`Provider::send`] posts).
    pub fn request_body(&self, key: &str, to: &str, body: &str) -> String {
        let callback = self.callback_base.as_deref().map(|b| callback_url(b, key));
        encode_form(&send_params(to, body, &self.sender, callback.as_deref()))
    }

    fn authorization(&self) -> HeaderValue {
        let mut value = HeaderValue::try_from(basic_authorization(
            &self.account_sid,
            self.auth_token.expose(),
        ))
        // A token that is not a valid header value is refused by
        // Twilio as no credentials: 401, the worker's alert.
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
        value.set_sensitive(true);
        value
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("messages_url", &self.messages_url)
            .field("account_sid", &self.account_sid)
            .field("auth_token", &self.auth_token)
            .field("sender", &self.sender)
            .field("callback_base", &self.callback_base)
            .finish()
    }
}

impl Provider for Client {
    async fn send(&self, key: &str, to: &str, body: &str) -> SendOutcome {
        let result = self
            .http
            .post(&self.messages_url)
            .header(AUTHORIZATION, self.authorization())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(self.request_body(key, to, body))
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

    /// Twilio finds a message only by its own SID, which an unknown outcome
    /// does not give courier: there is no lookup by courier's key. A
    /// tier-`c` worker never asks (`courier_core::tier::find_out` holds);
    /// this answers anyone who does without a request.
    async fn lookup(&self, _key: &str) -> LookupOutcome {
        LookupOutcome::Unknown("twilio has no lookup by courier's key".to_string())
    }
}

fn check_http_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("{url:?} is not an http(s) URL with a host"));
    }
    Ok(())
}

/// A transport error in a line, with its causes.
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "time-out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "transport error"
    };
    let mut text = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}
