//! The named providers whose webhooks a server takes, by route name
//! (`POST /v1/webhooks/{name}`), and the public URL they call.

use crate::inbound::Webhooks;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// The webhook schemes a server checks, by provider name. Cheap to clone.
#[derive(Clone, Default)]
pub struct WebhookRegistry {
    by_name: BTreeMap<String, Arc<dyn Webhooks>>,
    /// The scheme, host and port the providers call (as they sign it), when
    /// the server sits behind a proxy; `None`: taken from the request's
    /// `Host` header, over plain HTTP.
    public_url: Option<String>,
}

impl WebhookRegistry {
    pub fn with(mut self, name: &str, hooks: Arc<dyn Webhooks>) -> Self {
        self.by_name.insert(name.to_string(), hooks);
        self
    }

    pub fn with_public_url(mut self, url: Option<String>) -> Self {
        self.public_url = url.map(|u| u.trim_end_matches('/').to_string());
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Webhooks>> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// The URL the provider called: the public URL (or `http://` and the
    /// `Host` header) and the request's path and query.
    pub fn called_url(&self, host: Option<&str>, path_and_query: &str) -> String {
        match &self.public_url {
            Some(base) => format!("{base}{path_and_query}"),
            None => format!("http://{}{path_and_query}", host.unwrap_or("localhost")),
        }
    }
}

impl fmt::Debug for WebhookRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookRegistry")
            .field("names", &self.by_name.keys().collect::<Vec<_>>())
            .field("public_url", &self.public_url)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_called_url_is_the_public_one_or_the_hosts() {
        let r = WebhookRegistry::default();
        assert_eq!(
            r.called_url(Some("127.0.0.1:9"), "/v1/webhooks/twilio?key=k"),
            "http://127.0.0.1:9/v1/webhooks/twilio?key=k"
        );
        let r = r.with_public_url(Some("https://c.example/".into()));
        assert_eq!(
            r.called_url(Some("10.0.0.1"), "/v1/webhooks/twilio"),
            "https://c.example/v1/webhooks/twilio"
        );
    }
}
