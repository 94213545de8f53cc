//! The named providers, their tiers, and where their settings come from.

use crate::any::AnyProvider;
use crate::inbound::Webhooks;
pub use crate::settings::{Secret, Settings, SettingsError};
use courier_core::Tier;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The named providers courier sends through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Named {
    Twilio,
    Telnyx,
    Infobip,
}

impl Named {
    pub const ALL: [Named; 3] = [Named::Twilio, Named::Telnyx, Named::Infobip];

    /// The name of `--provider`, of the webhook route and of the fake's
    /// dialect.
    pub fn as_str(self) -> &'static str {
        match self {
            Named::Twilio => crate::twilio::NAME,
            Named::Telnyx => crate::telnyx::NAME,
            Named::Infobip => crate::infobip::NAME,
        }
    }

    /// The settings a double of it (`courier provider --dialect`) expects,
    /// from the fake's API key and webhook secret: what a test run writes
    /// in its credentials file. Not a real account's.
    pub fn double_settings(self, api_key: &str, secret: &str) -> Vec<(&'static str, String)> {
        let from = "+15550100000".to_string();
        match self {
            Named::Twilio => vec![
                ("TWILIO_ACCOUNT_SID", format!("AC{}", "0".repeat(32))),
                ("TWILIO_AUTH_TOKEN", api_key.to_string()),
                ("TWILIO_FROM", from),
            ],
            Named::Telnyx => vec![
                ("TELNYX_API_KEY", api_key.to_string()),
                ("TELNYX_FROM", from),
                (
                    "TELNYX_PUBLIC_KEY",
                    crate::telnyx::keypair_from_secret(secret).1,
                ),
            ],
            Named::Infobip => vec![
                ("INFOBIP_API_KEY", api_key.to_string()),
                ("INFOBIP_FROM", from),
                ("INFOBIP_WEBHOOK_SECRET", secret.to_string()),
                ("INFOBIP_IDEMPOTENT", "on".to_string()),
                ("INFOBIP_IDEMPOTENCY_WINDOW_S", "86400".to_string()),
            ],
        }
    }
}

impl serde::Serialize for Named {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Named {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Named::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Named::ALL.iter().map(|n| n.as_str()).collect();
                format!("unknown provider {s:?}: one of {}", names.join(", "))
            })
    }
}

/// What a worker sends through, and what a server checks webhooks of.
impl Named {
    /// The settings it reads (`NAME=value`, from the credentials file or
    /// the environment).
    pub fn settings_names(self) -> &'static [&'static str] {
        match self {
            Named::Twilio => crate::twilio::SETTINGS,
            Named::Telnyx => crate::telnyx::SETTINGS,
            Named::Infobip => crate::infobip::SETTINGS,
        }
    }

    /// Its tier with these settings: the best its public reference lets
    /// courier rely on (`docs/providers.md`); Infobip's is `a` only once
    /// the account's idempotent sending is on.
    pub fn tier(self, settings: &Settings) -> Tier {
        match self {
            Named::Twilio | Named::Telnyx => Tier::C(courier_core::UnknownPolicy::Hold),
            Named::Infobip => crate::infobip::tier(settings),
        }
    }

    /// The tier of its double (as [`Named::double_settings`] configures it).
    pub fn double_tier(self) -> Tier {
        let pairs = self.double_settings("api-key", "secret");
        self.tier(&Settings::from_pairs(
            pairs.iter().map(|(k, v)| (*k, v.as_str())),
        ))
    }

    /// Checks the worker's limits against the provider's settings: for
    /// Infobip, its idempotency window must cover courier's key retention
    /// (`--key-retention-s`), or a resend after the window would create.
    pub fn check_limits(
        self,
        settings: &Settings,
        key_retention_s: u64,
    ) -> Result<(), SettingsError> {
        match self {
            Named::Infobip if crate::infobip::tier(settings) == Tier::A => {
                crate::infobip::check_key_retention(settings, key_retention_s)
            }
            _ => Ok(()),
        }
    }

    /// The provider's own API, when `--provider-url` is not given (none
    /// for Infobip, whose base URL is per account).
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Named::Twilio => Some("https://api.twilio.com"),
            Named::Telnyx => Some("https://api.telnyx.com"),
            Named::Infobip => None,
        }
    }

    /// Its client: `callback_base` is this provider's webhook route on the
    /// courier server (`https://courier.example/v1/webhooks/twilio`).
    pub fn client(
        self,
        settings: &Settings,
        base_url: &str,
        callback_base: Option<&str>,
        timeout: Duration,
    ) -> Result<AnyProvider, SettingsError> {
        Ok(match self {
            Named::Twilio => AnyProvider::Twilio(crate::twilio::Client::new(
                settings,
                base_url,
                callback_base,
                timeout,
            )?),
            Named::Telnyx => AnyProvider::Telnyx(crate::telnyx::Client::new(
                settings,
                base_url,
                callback_base,
                timeout,
            )?),
            Named::Infobip => AnyProvider::Infobip(crate::infobip::Client::new(
                settings,
                base_url,
                callback_base,
                timeout,
            )?),
        })
    }

    /// Its webhook scheme, for a server's route `/v1/webhooks/{name}`.
    pub fn webhooks(self, settings: &Settings) -> Result<Arc<dyn Webhooks>, SettingsError> {
        Ok(match self {
            Named::Twilio => Arc::new(crate::twilio::Hooks::new(settings)?),
            Named::Telnyx => Arc::new(crate::telnyx::Hooks::new(settings)?),
            Named::Infobip => Arc::new(crate::infobip::Hooks::new(settings)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in Named::ALL {
            assert_eq!(n.as_str().parse::<Named>(), Ok(n));
        }
        assert!("nope".parse::<Named>().is_err());
    }

    #[test]
    fn each_double_is_reached_with_its_settings_and_its_tier() {
        for n in Named::ALL {
            let settings: Vec<(&str, String)> = n.double_settings("api-key", "secret");
            let s = Settings::from_pairs(settings.iter().map(|(k, v)| (*k, v.as_str())));
            for name in n.settings_names() {
                let optional = name.contains("IDEMPOTEN");
                assert!(optional || s.optional(name).is_some(), "{n}: {name}");
            }
            n.client(
                &s,
                "http://127.0.0.1:9",
                Some("http://127.0.0.1:8/v1/webhooks/x"),
                Duration::from_secs(1),
            )
            .unwrap_or_else(|e| panic!("{n}: {e}"));
            n.webhooks(&s).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
        let tiers: Vec<Tier> = Named::ALL
            .iter()
            .map(|n| {
                n.tier(&Settings::from_pairs(
                    n.double_settings("k", "s")
                        .iter()
                        .map(|(k, v)| (*k, v.as_str())),
                ))
            })
            .collect();
        let c = Tier::C(courier_core::UnknownPolicy::Hold);
        assert_eq!(tiers, [c, c, Tier::A]);
        // Infobip is tier a only with its idempotent sending on.
        assert_eq!(Named::Infobip.tier(&Settings::default()), c);
    }
}
