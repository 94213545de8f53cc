//! Typed configurations of the child processes, and the flags each becomes.
//!
//! The flags are written here and nowhere else; each subcommand's parser is
//! in courier-cli, whose tests parse what [`ServerSpec::args`],
//! [`FakeSpec::args`] and [`WorkerSpec::args`] produce and compare the result
//! with the struct (a round trip), so a flag renamed on one side fails a test.

use courier_core::retention::Retention;
use courier_core::{Limits, Tier};
use std::fmt::Display;
use std::path::PathBuf;

/// The broken resend mode of a negative control (`--unsafe-resend`), with
/// the `negative-controls` feature.
#[cfg(feature = "negative-controls")]
pub use courier_dispatch::broken::UnsafeResend;

/// Without the `negative-controls` feature there is no broken resend mode:
/// a type with no value, so an `Option<UnsafeResend>` is always `None` and
/// the specs read the same with and without the feature.
#[cfg(not(feature = "negative-controls"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum UnsafeResend {}

#[cfg(not(feature = "negative-controls"))]
impl UnsafeResend {
    /// The flag value that names this mode (there is none).
    pub fn as_flag(self) -> &'static str {
        match self {}
    }
}

/// `--name value`, as two arguments.
fn flag(name: &str, value: impl Display) -> [String; 2] {
    [format!("--{name}"), value.to_string()]
}

/// A named provider (`courier_providers::Named`) and the file of its
/// settings (`NAME=value` lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedProvider {
    pub name: String,
    pub credentials_file: PathBuf,
}

/// `courier serve`: the enqueue API and the provider's webhooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub database_url: String,
    /// `host:port`; port 0 picks a free one (the process says which).
    pub listen: String,
    pub webhook_secret: String,
    /// A named provider whose webhooks it also takes
    /// (`/v1/webhooks/{name}`).
    pub named: Option<NamedProvider>,
}

impl ServerSpec {
    pub fn args(&self) -> Vec<String> {
        let mut a = vec!["serve".to_string()];
        a.extend(flag("database-url", &self.database_url));
        a.extend(flag("listen", &self.listen));
        a.extend(flag("webhook-secret", &self.webhook_secret));
        if let Some(n) = &self.named {
            a.extend(flag("provider-webhooks", &n.name));
            a.extend(flag("credentials-file", n.credentials_file.display()));
        }
        a
    }
}

/// `courier provider`: the flaky fake provider, its faults on, seeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeSpec {
    pub listen: String,
    /// Its append-only log, the ground truth of the verdict.
    pub log: PathBuf,
    pub api_key: String,
    pub webhook_secret: String,
    pub seed: u64,
    /// Which parts of the contract it leaves out (a lower guarantee tier).
    pub modes: FakeModes,
    /// The provider it speaks as (`courier provider --dialect`):
    /// `contract`, or a named provider's double.
    pub dialect: String,
}

/// The fake provider's tier modes (`courier provider --ignore-key
/// --no-lookup --lookup-lag-ms`); the default is the contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FakeModes {
    /// No deduplication: every send creates a message.
    pub ignore_key: bool,
    /// No lookup: every lookup answers 501.
    pub no_lookup: bool,
    /// Lookups answer 404 for this long after a message was created.
    pub lookup_lag_ms: u64,
    /// No faults (`--no-faults`): every answer as the contract says, at once.
    pub faults_off: bool,
    /// Its own rate limit (`--rate-limit N/s`), sends a second: a send over
    /// it is answered 429 with `Retry-After`.
    pub rate_limit: Option<u32>,
}

impl FakeModes {
    /// The fake as a provider of `tier`: a the contract, a- no lookup, b no
    /// deduplication and lookups that lag `lag_ms`, c neither.
    pub fn for_tier(tier: Tier, lag_ms: u64) -> Self {
        match tier {
            Tier::A => FakeModes::default(),
            Tier::AMinus => FakeModes {
                no_lookup: true,
                ..FakeModes::default()
            },
            Tier::B => FakeModes {
                ignore_key: true,
                lookup_lag_ms: lag_ms,
                ..FakeModes::default()
            },
            Tier::C(_) => FakeModes {
                ignore_key: true,
                no_lookup: true,
                ..FakeModes::default()
            },
        }
    }
}

impl FakeSpec {
    pub fn args(&self) -> Vec<String> {
        let mut a = vec!["provider".to_string()];
        a.extend(flag("listen", &self.listen));
        a.extend(flag("log", self.log.display()));
        a.extend(flag("api-key", &self.api_key));
        a.extend(flag("webhook-secret", &self.webhook_secret));
        a.extend(flag("seed", self.seed));
        let m = self.modes;
        if m.ignore_key {
            a.push("--ignore-key".to_string());
        }
        if m.no_lookup {
            a.push("--no-lookup".to_string());
        }
        if m.lookup_lag_ms > 0 {
            a.extend(flag("lookup-lag-ms", m.lookup_lag_ms));
        }
        if m.faults_off {
            a.push("--no-faults".to_string());
        }
        if let Some(n) = m.rate_limit {
            a.extend(flag("rate-limit", format!("{n}/s")));
        }
        if self.dialect != "contract" {
            a.extend(flag("dialect", &self.dialect));
        }
        a
    }
}

/// How a worker reaches the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTarget {
    pub url: String,
    pub api_key: String,
    /// Where the provider sends status webhooks (the server's
    /// `/v1/webhooks/provider`).
    pub callback_url: Option<String>,
}

/// `courier worker`: one worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    pub database_url: String,
    pub provider: ProviderTarget,
    /// A named provider instead of the contract's (`--provider NAME
    /// --credentials-file F`; `provider.api_key` is then not sent).
    pub named: Option<NamedProvider>,
    /// The limits a worker takes as flags: [`WORKER_LIMIT_FLAGS`]. The other
    /// fields of [`Limits`] (backoff, batch sizes of the API) are not flags
    /// and keep their defaults in the worker, whatever they are here.
    pub limits: Limits,
    /// The retention windows and the pruner's bounds: [`WORKER_RETENTION_FLAGS`].
    pub retention: Retention,
    /// The provider's guarantee tier (`courier worker --tier`).
    pub tier: Tier,
    /// DEMONSTRATION ONLY: the broken resend mode of a negative control
    /// (always `None` without the `negative-controls` feature).
    pub unsafe_resend: Option<UnsafeResend>,
    /// DEMONSTRATION ONLY: the worker ignores every action's `expires_at`
    /// (`--unsafe-ignore-expiry`, a flag only a `negative-controls` build
    /// has).
    pub unsafe_ignore_expiry: bool,
    /// DEMONSTRATION ONLY: each worker names a provider gate of its own
    /// (`--provider-gate gate-SEED`), so a 429 pauses only the worker that
    /// got it; otherwise every worker names the provider's (the default).
    pub unshared_gate: bool,
}

/// The limit flags of `courier worker`, in the order [`WorkerSpec::args`]
/// writes them.
pub const WORKER_LIMIT_FLAGS: [&str; 11] = [
    "lease-ttl-ms",
    "heartbeat-interval-ms",
    "send-margin-ms",
    "request-timeout-ms",
    "store-in-flight-max",
    "claim-batch-max",
    "concurrency",
    "final-overdue-ms",
    "key-retention-s",
    "intent-age-alert-percent",
    "lookup-lag-ms",
];

/// The retention flags of `courier worker`, in the order [`WorkerSpec::args`]
/// writes them.
pub const WORKER_RETENTION_FLAGS: [&str; 6] = [
    "action-retention-s",
    "webhook-retry-horizon-s",
    "webhook-event-retention-s",
    "event-retention-s",
    "prune-batch-rows-max",
    "prune-interval-ms",
];

impl WorkerSpec {
    /// The worker's flags; `seed` seeds its jitter (each worker its own).
    pub fn args(&self, seed: u64) -> Vec<String> {
        let l = &self.limits;
        let mut a = vec!["worker".to_string()];
        a.extend(flag("database-url", &self.database_url));
        a.extend(flag("provider-url", &self.provider.url));
        match &self.named {
            None => a.extend(flag("provider-api-key", &self.provider.api_key)),
            Some(n) => {
                a.extend(flag("provider", &n.name));
                a.extend(flag("credentials-file", n.credentials_file.display()));
            }
        }
        if let Some(cb) = &self.provider.callback_url {
            a.extend(flag("callback-url", cb));
        }
        let values: [u64; 11] = [
            l.lease_ttl_ms,
            l.heartbeat_interval_ms,
            l.send_margin_ms,
            l.request_timeout_ms,
            l.store_in_flight_max.into(),
            l.claim_batch_max.into(),
            l.worker_concurrency_max.into(),
            l.final_overdue_ms,
            l.key_retention_s,
            l.intent_age_alert_percent.into(),
            l.lookup_lag_ms,
        ];
        for (name, v) in WORKER_LIMIT_FLAGS.iter().zip(values) {
            a.extend(flag(name, v));
        }
        let r = &self.retention;
        let kept: [u64; 6] = [
            r.action_retention_s,
            r.webhook_retry_horizon_s,
            r.webhook_event_retention_s,
            r.event_retention_s,
            r.prune_batch_rows_max.into(),
            r.prune_interval_ms,
        ];
        for (name, v) in WORKER_RETENTION_FLAGS.iter().zip(kept) {
            a.extend(flag(name, v));
        }
        a.extend(flag("seed", seed));
        a.extend(flag("tier", self.tier));
        if let Some(mode) = self.unsafe_resend {
            // The workers build the broken provider wrapper (courier_dispatch::broken).
            a.extend(flag("unsafe-resend", mode.as_flag()));
        }
        if self.unsafe_ignore_expiry {
            a.push("--unsafe-ignore-expiry".to_string());
        }
        if self.unshared_gate {
            a.extend(flag("provider-gate", format!("gate-{seed}")));
        }
        a
    }
}

/// The limits of a chaos worker: a short lease, with the heartbeat, the
/// request time-out and the send margin scaled to it.
pub fn chaos_limits(lease_ttl_ms: u64, concurrency: u32) -> Limits {
    Limits {
        lease_ttl_ms,
        heartbeat_interval_ms: (lease_ttl_ms / 5).max(1),
        request_timeout_ms: (lease_ttl_ms / 2).max(1),
        send_margin_ms: (lease_ttl_ms / 5).max(1),
        worker_concurrency_max: concurrency,
        final_overdue_ms: 5_000,
        ..Limits::default()
    }
}

/// The retention of a chaos worker: pruning on, with webhook event ids kept
/// 45 s (the fake provider retries a webhook for under 35 s), so ids are
/// pruned while faults land; finished actions and events outlast the run,
/// since the judge reads them at the end.
pub fn chaos_retention() -> Retention {
    Retention {
        webhook_retry_horizon_s: 40,
        webhook_event_retention_s: 45,
        prune_interval_ms: 500,
        ..Retention::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_flag_carries_its_own_value() {
        // Distinct values, so a flag paired with the wrong field shows.
        let limits = Limits {
            lease_ttl_ms: 1,
            heartbeat_interval_ms: 2,
            send_margin_ms: 3,
            request_timeout_ms: 4,
            store_in_flight_max: 5,
            claim_batch_max: 6,
            worker_concurrency_max: 7,
            final_overdue_ms: 8,
            key_retention_s: 9,
            intent_age_alert_percent: 10,
            lookup_lag_ms: 11,
            ..Limits::default()
        };
        let spec = WorkerSpec {
            database_url: "postgres://db".into(),
            provider: ProviderTarget {
                url: "http://p".into(),
                api_key: "k".into(),
                callback_url: None,
            },
            named: None,
            limits,
            retention: Retention {
                action_retention_s: 12,
                webhook_retry_horizon_s: 13,
                webhook_event_retention_s: 14,
                event_retention_s: 15,
                prune_batch_rows_max: 16,
                prune_interval_ms: 17,
            },
            tier: Tier::AMinus,
            unsafe_resend: None,
            unsafe_ignore_expiry: false,
            unshared_gate: false,
        };
        let a = spec.args(42);
        let tier_at = a.iter().position(|x| x == "--tier").unwrap();
        assert_eq!(a[tier_at + 1], "a-");
        for (i, name) in WORKER_LIMIT_FLAGS.iter().enumerate() {
            let at = a.iter().position(|x| *x == format!("--{name}")).unwrap();
            assert_eq!(a[at + 1], (i + 1).to_string(), "--{name}");
        }
        for (i, name) in WORKER_RETENTION_FLAGS.iter().enumerate() {
            let at = a.iter().position(|x| *x == format!("--{name}")).unwrap();
            assert_eq!(a[at + 1], (i + 12).to_string(), "--{name}");
        }
        assert!(!a.contains(&"--callback-url".to_string()));
        assert!(!a.contains(&"--unsafe-resend".to_string()));
        assert!(!a.contains(&"--unsafe-ignore-expiry".to_string()));
        let seed_at = a.iter().position(|x| x == "--seed").unwrap();
        assert_eq!(a[seed_at + 1], "42");
    }

    #[cfg(feature = "negative-controls")]
    #[test]
    fn a_broken_worker_is_told_its_mode_last() {
        let spec = WorkerSpec {
            database_url: "postgres://db".into(),
            provider: ProviderTarget {
                url: "http://p".into(),
                api_key: "k".into(),
                callback_url: None,
            },
            named: None,
            limits: Limits::default(),
            retention: Retention::default(),
            tier: Tier::A,
            unsafe_resend: Some(UnsafeResend::NewKey),
            unsafe_ignore_expiry: false,
            unshared_gate: false,
        };
        let a = spec.args(42);
        assert_eq!(a[a.len() - 2..], ["--unsafe-resend", "new-key"]);
    }

    #[test]
    fn a_worker_that_ignores_the_expiry_is_told_so_last() {
        let spec = WorkerSpec {
            database_url: "postgres://db".into(),
            provider: ProviderTarget {
                url: "http://p".into(),
                api_key: "k".into(),
                callback_url: None,
            },
            named: None,
            limits: Limits::default(),
            retention: Retention::default(),
            tier: Tier::A,
            unsafe_resend: None,
            unsafe_ignore_expiry: true,
            unshared_gate: false,
        };
        let a = spec.args(42);
        assert_eq!(a.last().map(String::as_str), Some("--unsafe-ignore-expiry"));
        assert!(!a.contains(&"--unsafe-resend".to_string()));
    }

    #[test]
    fn chaos_limits_scale_with_the_lease_and_validate() {
        let l = chaos_limits(2_000, 16);
        assert_eq!(
            (
                l.heartbeat_interval_ms,
                l.request_timeout_ms,
                l.send_margin_ms
            ),
            (400, 1_000, 400)
        );
        assert_eq!(l.worker_concurrency_max, 16);
        l.validate().unwrap();
    }
}
