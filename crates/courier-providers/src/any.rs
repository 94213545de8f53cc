//! One provider type for a worker that picks its provider at start:
//! courier's contract client, or a named provider's adapter.

use courier_provider::{LookupOutcome, Provider, ProviderClient, SendOutcome};

/// The provider a worker runs with (`courier worker --provider NAME`).
#[derive(Clone)]
pub enum AnyProvider {
    /// courier's own provider contract.
    Contract(ProviderClient),
    Twilio(crate::twilio::Client),
    Telnyx(crate::telnyx::Client),
    Infobip(crate::infobip::Client),
}

impl Provider for AnyProvider {
    async fn send(&self, key: &str, to: &str, body: &str) -> SendOutcome {
        match self {
            AnyProvider::Contract(c) => c.send(key, to, body).await,
            AnyProvider::Twilio(c) => c.send(key, to, body).await,
            AnyProvider::Telnyx(c) => c.send(key, to, body).await,
            AnyProvider::Infobip(c) => c.send(key, to, body).await,
        }
    }

    async fn lookup(&self, key: &str) -> LookupOutcome {
        match self {
            AnyProvider::Contract(c) => c.lookup(key).await,
            AnyProvider::Twilio(c) => c.lookup(key).await,
            AnyProvider::Telnyx(c) => c.lookup(key).await,
            AnyProvider::Infobip(c) => c.lookup(key).await,
        }
    }
}
