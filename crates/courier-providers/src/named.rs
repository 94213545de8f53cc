//! The named providers, their tiers, and where their settings come from.

use crate::any::AnyProvider;
use crate::inbound::Webhooks;
use courier_core::Tier;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// A credential: its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret itself, for the one place that sends or checks it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A provider's settings, by name (`TWILIO_ACCOUNT_SID`, ...): from the
/// environment, or from a file of `NAME=value` lines (`#` comments), the
/// file's values first. Every value is kept as a [`Secret`].
#[derive(Debug, Clone, Default)]
pub struct Settings(BTreeMap<String, Secret>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{provider} needs {name} (in the environment or the credentials file)")]
    Missing {
        provider: &'static str,
        name: String,
    },
    #[error("{provider}: {name} is not valid: {why}")]
    Invalid {
        provider: &'static str,
        name: String,
        why: String,
    },
    #[error("cannot read the credentials file {path}: {why}")]
    File { path: String, why: String },
}

impl Settings {
    /// `names` from `file` (when given), then from `env` for those the file
    /// does not set.
    pub fn load(
        names: &[&str],
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, SettingsError> {
        let mut out = BTreeMap::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| SettingsError::File {
                path: path.display().to_string(),
                why: e.to_string(),
            })?;
            for line in text.lines().map(str::trim) {
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                if let Some((k, v)) = line.split_once('=') {
                    if names.contains(&k.trim()) {
                        out.insert(k.trim().to_string(), Secret::new(v.trim()));
                    }
                }
            }
        }
        for name in names {
            if !out.contains_key(*name) {
                if let Some(v) = env(name).filter(|v| !v.is_empty()) {
                    out.insert(name.to_string(), Secret::new(v));
                }
            }
        }
        Ok(Settings(out))
    }

    /// A setting a provider cannot work without.
    pub fn required(&self, provider: &'static str, name: &str) -> Result<&Secret, SettingsError> {
        self.0.get(name).ok_or_else(|| SettingsError::Missing {
            provider,
            name: name.to_string(),
        })
    }

    pub fn optional(&self, name: &str) -> Option<&Secret> {
        self.0.get(name)
    }

    /// Settings given as pairs (tests, and the rig's doubles).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Settings {
        Settings(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), Secret::new(v)))
                .collect(),
        )
    }
}

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
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "Secret(<redacted>) <redacted>");
        let settings = Settings::from_pairs([("A_TOKEN", "hunter2")]);
        assert!(!format!("{settings:?}").contains("hunter2"));
        assert_eq!(
            settings.required("x", "A_TOKEN").unwrap().expose(),
            "hunter2"
        );
    }

    #[test]
    fn settings_come_from_the_file_first_then_the_environment() {
        let dir = std::env::temp_dir().join(format!("courier-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("creds");
        std::fs::write(&file, "# comment\nA = from-file\nUNASKED=x\n").unwrap();
        let env = |k: &str| match k {
            "A" => Some("from-env".to_string()),
            "B" => Some("b-env".to_string()),
            _ => None,
        };
        let s = Settings::load(&["A", "B", "C"], Some(&file), env).unwrap();
        assert_eq!(s.required("p", "A").unwrap().expose(), "from-file");
        assert_eq!(s.required("p", "B").unwrap().expose(), "b-env");
        assert_eq!(
            s.required("p", "C").unwrap_err(),
            SettingsError::Missing {
                provider: "p",
                name: "C".into()
            }
        );
        assert!(s.optional("UNASKED").is_none());
        let missing = Settings::load(&["A"], Some(&dir.join("nope")), |_| None);
        assert!(matches!(missing, Err(SettingsError::File { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
