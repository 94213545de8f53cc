//! A provider's settings: from a credentials file or the environment,
//! every value a [`Secret`] that never prints.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

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

/// The HTTP client of a provider's adapter: `timeout` bounds one request,
/// connect included; connections are kept 30 s between requests.
pub fn http_client(
    provider: &'static str,
    timeout: std::time::Duration,
) -> Result<reqwest::Client, SettingsError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_idle_timeout(std::time::Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| SettingsError::Invalid {
            provider,
            name: "the HTTP client".to_string(),
            why: e.to_string(),
        })
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
}
