//! The deliberately broken resend modes, for the chaos run's negative
//! controls only: they show that the verifier catches what the protocol
//! prevents. They wrap the provider ([`UnsafeProvider`]); the worker itself
//! has no branch for them.
//!
//! After a send whose outcome is unknown, the wrapper resends at once,
//! without a lookup ([`UnsafeResend::NoLookup`], a blind resend) or with a
//! new key ([`UnsafeResend::NewKey`], a second message), until an answer is
//! known or [`BLIND_RESENDS_MAX`] resends went out; the worker then sees
//! only the last answer.
//!
//! Compiled only with the `negative-controls` feature: the `courier` binary
//! has `--unsafe-resend` only when built with it
//! (`cargo build -p courier-cli --features negative-controls`).
//!
//! # Invariants
//! - Never used by `courier demo`, `courier serve` or a worker started
//!   without the `--unsafe-resend` flag, which the README's build lacks.

use crate::worker::Provider;
use courier_provider::{LookupOutcome, SendOutcome};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::future::Future;
use std::sync::Mutex;

/// How the broken mode resends after an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnsafeResend {
    /// Resend at once with the same key, without a lookup (a blind resend).
    NoLookup,
    /// Resend at once with a new key (a second message).
    NewKey,
}

impl UnsafeResend {
    /// The flag value that names this mode.
    pub fn as_flag(self) -> &'static str {
        match self {
            UnsafeResend::NoLookup => "no-lookup",
            UnsafeResend::NewKey => "new-key",
        }
    }
}

impl std::str::FromStr for UnsafeResend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "no-lookup" => Ok(UnsafeResend::NoLookup),
            "new-key" => Ok(UnsafeResend::NewKey),
            other => Err(format!("unknown mode {other:?} (no-lookup | new-key)")),
        }
    }
}

/// The most blind resends after one unknown outcome: enough that the
/// verifier sees them, few enough that a provider that stays away does not
/// keep the wrapper spinning.
pub const BLIND_RESENDS_MAX: u32 = 8;

/// A provider wrapped in a broken resend mode.
pub struct UnsafeProvider<P> {
    inner: P,
    mode: UnsafeResend,
    /// Draws the new keys (seeded, so a chaos seed replays them).
    rng: Mutex<StdRng>,
}

impl<P> UnsafeProvider<P> {
    pub fn new(inner: P, mode: UnsafeResend, seed: u64) -> Self {
        UnsafeProvider {
            inner,
            mode,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    fn resend_key(&self, key: &str) -> String {
        match self.mode {
            UnsafeResend::NoLookup => key.to_string(),
            UnsafeResend::NewKey => {
                let n: u32 = self.rng.lock().expect("rng").random();
                format!("{key}-unsafe-{n}")
            }
        }
    }
}

impl<P: Provider> Provider for UnsafeProvider<P> {
    async fn send(&self, key: &str, to: &str, body: &str) -> SendOutcome {
        let mut out = self.inner.send(key, to, body).await;
        for _ in 0..BLIND_RESENDS_MAX {
            if !matches!(out, SendOutcome::Unknown(_)) {
                break;
            }
            let key = self.resend_key(key);
            out = self.inner.send(&key, to, body).await;
        }
        out
    }

    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send {
        self.inner.lookup(key)
    }
}
