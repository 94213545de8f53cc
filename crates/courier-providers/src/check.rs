//! `courier providers check`: what can be checked of a named provider's
//! setup without sending a message.
//!
//! It can check that every setting is there, that the provider accepts the
//! credentials (one read-only request each, on an endpoint its reference
//! documents: Twilio's message list (one page of one), Telnyx's balance,
//! which its reference names as the authentication check, Infobip's
//! message logs for a key that was never sent), and that a courier server
//! takes the provider's webhooks (an unsigned request to its route must be
//! refused for its signature, not as an unknown provider). It cannot check,
//! without sending, that a message would go out (the sender's number, the
//! destination's country, the balance), that the provider's callbacks reach
//! the server from where the provider is, or Infobip's idempotent sending
//! (only Infobip can confirm it is on).

use crate::named::Named;
use crate::settings::{Settings, SettingsError};
use std::time::Duration;

/// The read-only request that checks the credentials: method GET, the URL,
/// and the `Authorization` header's value.
#[derive(Clone, PartialEq, Eq)]
pub struct CredentialsRequest {
    pub url: String,
    pub authorization: String,
}

impl std::fmt::Debug for CredentialsRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialsRequest")
            .field("url", &self.url)
            .field("authorization", &"<redacted>")
            .finish()
    }
}

/// The request for `named`, with its settings, against `base_url`.
pub fn credentials_request(
    named: Named,
    settings: &Settings,
    base_url: &str,
) -> Result<CredentialsRequest, SettingsError> {
    let base = base_url.trim_end_matches('/');
    let name = named.as_str();
    Ok(match named {
        Named::Twilio => {
            let sid = settings.required(name, "TWILIO_ACCOUNT_SID")?.expose();
            let token = settings.required(name, "TWILIO_AUTH_TOKEN")?.expose();
            CredentialsRequest {
                url: format!("{base}{}?PageSize=1", crate::twilio::messages_path(sid)),
                authorization: crate::twilio::basic_authorization(sid, token),
            }
        }
        Named::Telnyx => CredentialsRequest {
            url: format!("{base}/v2/balance"),
            authorization: format!(
                "Bearer {}",
                settings.required(name, "TELNYX_API_KEY")?.expose()
            ),
        },
        Named::Infobip => CredentialsRequest {
            url: format!("{base}/sms/3/logs?messageId=courier-credentials-check"),
            authorization: format!(
                "App {}",
                settings.required(name, "INFOBIP_API_KEY")?.expose()
            ),
        },
    })
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// It answered as it should.
    Ok(String),
    /// It answered, and the answer says the setup is wrong.
    Wrong(String),
    /// No answer that says either way.
    Unknown(String),
}

/// The credentials' verdict from the answer's HTTP status.
pub fn credentials_verdict(status: u16) -> Found {
    match status {
        200..=299 => Found::Ok(format!("credentials accepted ({status})")),
        401 | 403 => Found::Wrong(format!("credentials refused ({status})")),
        _ => Found::Unknown(format!("the provider answered {status}")),
    }
}

/// The webhook route's verdict from a courier server's answer to an
/// unsigned request: refused for its signature means the route checks this
/// provider's scheme.
pub fn route_verdict(status: u16, error: Option<&str>) -> Found {
    match (status, error) {
        (401, Some("bad_signature")) => {
            Found::Ok("the server takes these webhooks and refused an unsigned one".into())
        }
        (404, Some("no_such_provider")) => Found::Wrong(
            "the server does not take these webhooks: start it with --provider-webhooks".into(),
        ),
        (s, e) => Found::Unknown(format!("the server answered {s} {}", e.unwrap_or(""))),
    }
}

/// Runs the credentials request.
pub async fn check_credentials(req: &CredentialsRequest, timeout: Duration) -> Found {
    let http = match reqwest::Client::builder().timeout(timeout).build() {
        Ok(h) => h,
        Err(e) => return Found::Unknown(format!("cannot build an HTTP client: {e}")),
    };
    match http
        .get(&req.url)
        .header(reqwest::header::AUTHORIZATION, &req.authorization)
        .send()
        .await
    {
        Ok(r) => credentials_verdict(r.status().as_u16()),
        // Without the URL: it may carry nothing secret, but say less.
        Err(e) => Found::Unknown(format!("no answer: {}", e.without_url())),
    }
}

/// Posts an unsigned, empty webhook to `route` (the server's
/// `/v1/webhooks/<name>`).
pub async fn check_route(route: &str, timeout: Duration) -> Found {
    let http = match reqwest::Client::builder().timeout(timeout).build() {
        Ok(h) => h,
        Err(e) => return Found::Unknown(format!("cannot build an HTTP client: {e}")),
    };
    match http.post(route).body("{}").send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            route_verdict(status, body["error"].as_str())
        }
        Err(e) => Found::Unknown(format!("no answer from the server: {}", e.without_url())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(n: Named) -> Settings {
        let pairs = n.double_settings("the-key", "s");
        Settings::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))
    }

    #[test]
    fn each_provider_is_checked_on_a_read_only_documented_endpoint() {
        let t = credentials_request(Named::Twilio, &settings(Named::Twilio), "https://x/").unwrap();
        assert!(
            t.url.starts_with("https://x/2010-04-01/Accounts/AC"),
            "{}",
            t.url
        );
        assert!(t.url.ends_with("/Messages.json?PageSize=1"));
        assert!(t.authorization.starts_with("Basic "));
        let x = credentials_request(Named::Telnyx, &settings(Named::Telnyx), "https://x").unwrap();
        assert_eq!(
            (x.url.as_str(), x.authorization.as_str()),
            ("https://x/v2/balance", "Bearer the-key")
        );
        let i =
            credentials_request(Named::Infobip, &settings(Named::Infobip), "https://x").unwrap();
        assert_eq!(i.authorization, "App the-key");
        assert!(i.url.contains("/sms/3/logs?messageId="));
        assert!(!format!("{i:?}").contains("the-key"));
        let missing = credentials_request(Named::Telnyx, &Settings::default(), "https://x");
        assert!(matches!(missing, Err(SettingsError::Missing { .. })));
    }

    #[test]
    fn verdicts_follow_the_answers() {
        assert!(matches!(credentials_verdict(200), Found::Ok(_)));
        assert!(matches!(credentials_verdict(401), Found::Wrong(_)));
        assert!(matches!(credentials_verdict(403), Found::Wrong(_)));
        assert!(matches!(credentials_verdict(503), Found::Unknown(_)));
        assert!(matches!(
            route_verdict(401, Some("bad_signature")),
            Found::Ok(_)
        ));
        assert!(matches!(
            route_verdict(404, Some("no_such_provider")),
            Found::Wrong(_)
        ));
        assert!(matches!(
            route_verdict(404, Some("no_route")),
            Found::Unknown(_)
        ));
        assert!(matches!(route_verdict(200, None), Found::Unknown(_)));
    }
}
