//! The fake provider's settings, checked once in [`FakeConfig::validate`].
//!
//! Every limit carries its unit last in its name. Durations that the command
//! line gives in seconds (`--key-retention-s`) are kept here in milliseconds
//! so tests can use tiny values.
//!
//! # Tier modes
//! Two settings make the fake behave like a provider that offers less than
//! the contract, so that a run can prove what courier promises at each of
//! its guarantee tiers from the fake's log:
//! - [`FakeConfig::ignore_key`] (`--ignore-key`): no deduplication. Every
//!   valid send creates a new message with its own id, plan, webhooks and
//!   `created` line; there is no replay, no `409` and no `422`. The key is
//!   only the client's reference: a lookup answers the earliest-created
//!   message of that reference that is visible, each message becoming
//!   visible `lookup_lag_ms` after its own creation. The time-out fault is
//!   drawn per send (by the key and the send's number among the key's sends).
//! - [`FakeConfig::lookup`] false (`--no-lookup`): every lookup is answered
//!   `501 {"error":"lookup_not_supported"}` and logged `faulted`.
//!
//! | tier | settings | the provider offers |
//! |---|---|---|
//! | `a` | the defaults | a key and a lookup by key (the contract) |
//! | `a-` | `--no-lookup` | a key, no lookup |
//! | `b` | `--ignore-key --lookup-lag-ms N` | no dedup, a lookup by reference that lags `N` ms |
//! | `c` | `--ignore-key --no-lookup` | neither |
//!
//! [`TIERS`] is this table; `--tier` sets the two booleans from it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The longest any configured delay may be (ten minutes): a guard against a
/// typo that would park requests or timers for days.
pub const DELAY_MS_MAX: u64 = 10 * 60 * 1000;
/// The longest key retention (30 days).
pub const KEY_RETENTION_MS_MAX: u64 = 30 * 24 * 3600 * 1000;
/// The longest `status_callback` URL accepted in a send.
pub const CALLBACK_BYTES_MAX: usize = 2048;
/// The longest message body, in characters (the contract's limit).
pub const BODY_CHARS_MAX: usize = 1600;
/// The highest `--rate-limit`, sends a second.
pub const RATE_LIMIT_PER_S_MAX: f64 = 100_000.0;
/// The largest `--rate-burst`.
pub const RATE_BURST_MAX: u32 = 100_000;

/// The four injected fault rates, each a probability per decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultRates {
    /// Per first send of a key (per send in ignore-key mode): the answer is
    /// held and lost (half of them after the message was created, half
    /// before anything was created).
    pub timeout: f64,
    /// Per status event: the event is delivered once more after a 2xx.
    pub duplicate_webhook: f64,
    /// Per message: the `sent` webhook is delivered after the final one.
    pub out_of_order: f64,
    /// Per message: the message fails some time after `sent`.
    pub late_failed: f64,
}

impl FaultRates {
    /// The contract's demo defaults.
    pub const DEFAULT: FaultRates = FaultRates {
        timeout: 0.05,
        duplicate_webhook: 0.02,
        out_of_order: 0.10,
        late_failed: 0.01,
    };
    /// All four rates at zero (`--faults off`).
    pub const NONE: FaultRates = FaultRates {
        timeout: 0.0,
        duplicate_webhook: 0.0,
        out_of_order: 0.0,
        late_failed: 0.0,
    };
}

impl Default for FaultRates {
    fn default() -> Self {
        FaultRates::DEFAULT
    }
}

impl fmt::Display for FaultRates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timeout-rate {} duplicate-webhook-rate {} out-of-order-rate {} late-failed-rate {}",
            self.timeout, self.duplicate_webhook, self.out_of_order, self.late_failed
        )
    }
}

/// What a send's latency is drawn from (a lookup's is always its request's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencySubject {
    /// The key and the provider's count of requests: every request draws
    /// afresh.
    Request,
    /// The recipient and body alone: the same message waits as long in
    /// every run, whatever its key and whatever came before it. For paired
    /// benchmarks that send the same messages in every run, so that their
    /// latencies differ only by what the courier did.
    Message,
    /// As `Message`, except that a body ending in `[latency N ms]` waits
    /// `N` ms (at most [`DELAY_MS_MAX`]) instead of a draw.
    ///
    /// A test control of the fake, as a payment sandbox's magic card numbers
    /// are of the sandbox: the client, not the fake's seed, picks how long a
    /// given message takes. Any client can use it: a test that needs one
    /// slow send among fast ones (a request time-out, a lease that must
    /// outlive a send, a store held back by its own slow message) states
    /// that message's latency instead of searching seeds for a draw; a load
    /// that states its messages' latencies can lay a distribution's
    /// quantiles evenly over a run (`courier bench fairness` does), so that
    /// every stretch of the run meets the same latencies and not the luck
    /// of a sample. A body that states nothing waits as under `Message`, so
    /// turning it on changes nothing for other clients.
    Stated,
}

/// A latency distribution, applied to each send and lookup.
///
/// Syntax: `0` or `25` (a fixed number of milliseconds), `uniform:5..50`
/// (uniform between the bounds, inclusive), `lognormal:median=20,sigma=0.6`
/// (log-normal with that median in milliseconds and that shape). Every draw
/// is capped at [`DELAY_MS_MAX`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    Fixed { ms: u64 },
    Uniform { min_ms: u64, max_ms: u64 },
    LogNormal { median_ms: f64, sigma: f64 },
}

impl Latency {
    pub const ZERO: Latency = Latency::Fixed { ms: 0 };

    /// True when no request is ever delayed (the fast path skips the timer).
    pub fn is_zero(&self) -> bool {
        matches!(self, Latency::Fixed { ms: 0 })
    }

    /// One draw, from two independent uniform numbers in `[0, 1)`.
    pub fn sample_ms(&self, u1: f64, u2: f64) -> u64 {
        let ms = match *self {
            Latency::Fixed { ms } => ms,
            Latency::Uniform { min_ms, max_ms } => MsRange { min_ms, max_ms }.sample(u1),
            Latency::LogNormal { median_ms, sigma } => {
                // Box-Muller: a standard normal from two uniforms.
                let r = (-2.0 * (1.0 - u1).ln()).sqrt();
                let z = r * (2.0 * std::f64::consts::PI * u2).cos();
                let v = median_ms * (sigma * z).exp();
                if v.is_finite() {
                    v.round().max(0.0) as u64
                } else {
                    DELAY_MS_MAX
                }
            }
        };
        ms.min(DELAY_MS_MAX)
    }

    fn check(&self) -> Result<(), String> {
        match *self {
            Latency::Fixed { ms } if ms > DELAY_MS_MAX => {
                Err(format!("latency {ms} ms is above {DELAY_MS_MAX} ms"))
            }
            Latency::Fixed { .. } => Ok(()),
            Latency::Uniform { min_ms, max_ms } => MsRange { min_ms, max_ms }.check("latency"),
            Latency::LogNormal { median_ms, sigma } => {
                if !(median_ms.is_finite() && median_ms > 0.0 && median_ms <= DELAY_MS_MAX as f64) {
                    return Err(format!(
                        "latency lognormal median must be within (0, {DELAY_MS_MAX}] ms, got {median_ms}"
                    ));
                }
                if !(sigma.is_finite() && (0.0..=3.0).contains(&sigma)) {
                    return Err(format!(
                        "latency lognormal sigma must be within [0, 3], got {sigma}"
                    ));
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Latency::Fixed { ms } => write!(f, "{ms}"),
            Latency::Uniform { min_ms, max_ms } => write!(f, "uniform:{min_ms}..{max_ms}"),
            Latency::LogNormal { median_ms, sigma } => {
                write!(f, "lognormal:median={median_ms},sigma={sigma}")
            }
        }
    }
}

impl FromStr for Latency {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let parsed = if let Some(range) = s.strip_prefix("uniform:") {
            if !range.contains("..") {
                return Err(format!("uniform latency is uniform:MIN..MAX, got {s:?}"));
            }
            let r: MsRange = range.parse()?;
            Latency::Uniform {
                min_ms: r.min_ms,
                max_ms: r.max_ms,
            }
        } else if let Some(params) = s.strip_prefix("lognormal:") {
            let (mut median_ms, mut sigma) = (None, None);
            for part in params.split(',') {
                let (name, value) = part
                    .split_once('=')
                    .ok_or_else(|| format!("lognormal parameters are name=value, got {part:?}"))?;
                let value: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("lognormal {name} is not a number: {value:?}"))?;
                match name.trim() {
                    "median" => median_ms = Some(value),
                    "sigma" => sigma = Some(value),
                    other => return Err(format!("unknown lognormal parameter {other:?}")),
                }
            }
            Latency::LogNormal {
                median_ms: median_ms.ok_or("lognormal needs median=MS")?,
                sigma: sigma.ok_or("lognormal needs sigma=S")?,
            }
        } else {
            let ms = s.parse::<u64>().map_err(|_| {
                format!(
                    "latency must be MS, uniform:MIN..MAX or lognormal:median=MS,sigma=S; got {s:?}"
                )
            })?;
            Latency::Fixed { ms }
        };
        parsed.check()?;
        Ok(parsed)
    }
}

/// An inclusive range of milliseconds, written `MIN..MAX` or a single `MS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsRange {
    pub min_ms: u64,
    pub max_ms: u64,
}

impl MsRange {
    pub const fn new(min_ms: u64, max_ms: u64) -> Self {
        MsRange { min_ms, max_ms }
    }

    /// The value at position `u` in `[0, 1)` of the range.
    pub fn sample(&self, u: f64) -> u64 {
        let span = self.max_ms.saturating_sub(self.min_ms);
        let offset = ((span as f64 + 1.0) * u).floor() as u64;
        self.min_ms + offset.min(span)
    }

    fn check(&self, what: &str) -> Result<(), String> {
        if self.min_ms > self.max_ms {
            return Err(format!(
                "{what}: {}..{} has its minimum above its maximum",
                self.min_ms, self.max_ms
            ));
        }
        if self.max_ms > DELAY_MS_MAX {
            return Err(format!(
                "{what}: {} ms is above {DELAY_MS_MAX} ms",
                self.max_ms
            ));
        }
        Ok(())
    }
}

impl fmt::Display for MsRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.min_ms, self.max_ms)
    }
}

impl FromStr for MsRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let num = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("expected milliseconds as MIN..MAX or MS, got {s:?}"))
        };
        let r = match s.split_once("..") {
            Some((a, b)) => MsRange::new(num(a)?, num(b)?),
            None => {
                let v = num(s)?;
                MsRange::new(v, v)
            }
        };
        r.check("range")?;
        Ok(r)
    }
}

/// A guarantee tier by the two modes that stand for it (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierModes {
    /// The tier's name, as `courier provider --tier` takes it.
    pub name: &'static str,
    /// [`FakeConfig::ignore_key`].
    pub ignore_key: bool,
    /// [`FakeConfig::lookup`].
    pub lookup: bool,
}

/// Every pairing of the two modes, by the tier it stands for.
pub const TIERS: [TierModes; 4] = [
    TierModes {
        name: "a",
        ignore_key: false,
        lookup: true,
    },
    TierModes {
        name: "a-",
        ignore_key: false,
        lookup: false,
    },
    TierModes {
        name: "b",
        ignore_key: true,
        lookup: true,
    },
    TierModes {
        name: "c",
        ignore_key: true,
        lookup: false,
    },
];

/// Everything the fake provider needs to run.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// The append-only log; an existing log is recovered on start.
    pub log_path: PathBuf,
    /// The bearer token every request must carry.
    pub api_key: String,
    /// The HMAC key of webhook signatures.
    pub webhook_secret: String,
    /// The seed of every fault and timing decision.
    pub seed: u64,
    pub faults: FaultRates,
    /// How long a timed-out send is held before it is answered `504`.
    pub timeout_hold_ms: u64,
    /// No deduplication (tiers `b` and `c`): every valid send makes a new
    /// message, and the key is only the client's reference that lookups
    /// find messages by (module docs). The log records the mode (each
    /// `created` line carries its send's number), and a restart in the
    /// other mode refuses the log.
    pub ignore_key: bool,
    /// Whether lookups are answered (false: `501`, tiers `a-` and `c`).
    pub lookup: bool,
    /// How long after a key's first send its lookups still answer `404`;
    /// in ignore-key mode, how long after each message's creation before
    /// a lookup can find that message.
    pub lookup_lag_ms: u64,
    /// Delay applied to each send and lookup.
    pub latency: Latency,
    /// What a send's latency is drawn from.
    pub latency_subject: LatencySubject,
    /// How long a key is remembered after its first send. In ignore-key
    /// mode, how long each send is remembered after it ended (its message
    /// stays findable by lookup for that long).
    pub key_retention_ms: u64,
    /// Delay from `accepted` to `sent`.
    pub sent_after_ms: MsRange,
    /// Delay from `sent` to `delivered`.
    pub delivered_after_ms: MsRange,
    /// Delay from `sent` to a late `failed`.
    pub failed_after_ms: MsRange,
    /// Where webhooks go for messages sent without a `status_callback`.
    pub default_callback: Option<String>,
    /// POSTs of one status event before the provider gives up on it.
    pub webhook_attempts_max: u32,
    /// Time-out of one webhook POST.
    pub webhook_timeout_ms: u64,
    /// Backoff between webhook attempts: `base * 2^n`, capped, jittered.
    pub webhook_backoff_base_ms: u64,
    pub webhook_backoff_cap_ms: u64,
    /// Webhook POSTs in flight at once.
    pub webhook_concurrency_max: usize,
    /// Largest send request body read; larger ones get `413`.
    pub request_bytes_max: usize,
    /// Keys remembered at once; beyond it new keys get `503`. In ignore-key
    /// mode it counts sends remembered instead (each message, each send
    /// still in flight and each send lost before creating), since one key
    /// may name any number of messages; beyond it every send gets `503`.
    pub keys_max: usize,
    /// `fdatasync` the log after each write (power-loss durability; slow).
    pub fsync: bool,
    /// The provider it speaks as (`crate::dialect`): the contract's, or a
    /// named provider's wire format and callbacks.
    pub dialect: Dialect,
    /// The fake's own rate limit (`--rate-limit`): sends admitted a second,
    /// metered by a token bucket (`crate::bucket`); `None`, no limit. A
    /// send over it is answered `429` with `Retry-After` before it claims
    /// its key or draws its latency or fate, and is logged `rejected`
    /// (`fault: rate_limited`). Lookups and webhooks are not metered, so a
    /// client can always find out what its refused sends did.
    pub rate_limit: Option<SendRate>,
    /// The bucket's size (`--rate-burst`): sends admitted at once after a
    /// quiet spell. Only with `rate_limit`; `None`, one second's worth
    /// ([`SendRate::default_burst`]).
    pub rate_burst: Option<u32>,
}

impl FakeConfig {
    /// The demo defaults around the three settings that have none.
    pub fn new(log_path: impl Into<PathBuf>, api_key: &str, webhook_secret: &str) -> Self {
        FakeConfig {
            log_path: log_path.into(),
            api_key: api_key.to_string(),
            webhook_secret: webhook_secret.to_string(),
            seed: 1,
            faults: FaultRates::DEFAULT,
            timeout_hold_ms: 5_000,
            ignore_key: false,
            lookup: true,
            lookup_lag_ms: 0,
            latency: Latency::ZERO,
            latency_subject: LatencySubject::Request,
            key_retention_ms: 3_600 * 1000,
            sent_after_ms: MsRange::new(20, 200),
            delivered_after_ms: MsRange::new(50, 500),
            failed_after_ms: MsRange::new(500, 2_000),
            default_callback: None,
            webhook_attempts_max: 8,
            webhook_timeout_ms: 2_000,
            webhook_backoff_base_ms: 100,
            webhook_backoff_cap_ms: 2_000,
            webhook_concurrency_max: 32,
            request_bytes_max: 64 * 1024,
            keys_max: 5_000_000,
            fsync: false,
            dialect: Dialect::Contract,
            rate_limit: None,
            rate_burst: None,
        }
    }

    /// The rate limit and its burst, when there is one.
    pub fn send_limit(&self) -> Option<(SendRate, u32)> {
        let rate = self.rate_limit?;
        Some((
            rate,
            self.rate_burst.unwrap_or_else(|| rate.default_burst()),
        ))
    }

    /// The tier the two modes stand for (`a`, `a-`, `b` or `c`).
    pub fn tier(&self) -> &'static str {
        TIERS
            .iter()
            .find(|t| t.ignore_key == self.ignore_key && t.lookup == self.lookup)
            .map_or("a", |t| t.name)
    }

    /// Sets the two modes to a tier's (`a`, `a-`, `b` or `c`).
    pub fn set_tier(&mut self, name: &str) -> Result<(), String> {
        let t = TIERS
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| format!("--tier must be one of a, a-, b, c; got {name:?}"))?;
        self.ignore_key = t.ignore_key;
        self.lookup = t.lookup;
        Ok(())
    }

    /// Checks every setting; the message names the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.log_path.as_os_str().is_empty() {
            return Err("--log must name a file".into());
        }
        check_secret("--api-key", &self.api_key)?;
        check_secret("--webhook-secret", &self.webhook_secret)?;
        for (flag, rate) in [
            ("--timeout-rate", self.faults.timeout),
            ("--duplicate-webhook-rate", self.faults.duplicate_webhook),
            ("--out-of-order-rate", self.faults.out_of_order),
            ("--late-failed-rate", self.faults.late_failed),
        ] {
            if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
                return Err(format!("{flag} must be within 0..=1, got {rate}"));
            }
        }
        for (flag, ms) in [
            ("--timeout-hold-ms", self.timeout_hold_ms),
            ("--lookup-lag-ms", self.lookup_lag_ms),
            ("--webhook-timeout-ms", self.webhook_timeout_ms),
            ("--webhook-backoff-cap-ms", self.webhook_backoff_cap_ms),
        ] {
            if ms > DELAY_MS_MAX {
                return Err(format!("{flag} must be at most {DELAY_MS_MAX}, got {ms}"));
            }
        }
        if !self.lookup && self.lookup_lag_ms > 0 {
            return Err("--lookup-lag-ms has no effect with --no-lookup: drop one".into());
        }
        self.latency
            .check()
            .map_err(|e| format!("--latency-ms: {e}"))?;
        self.sent_after_ms.check("--sent-after-ms")?;
        self.delivered_after_ms.check("--delivered-after-ms")?;
        self.failed_after_ms.check("--failed-after-ms")?;
        if self.key_retention_ms == 0 || self.key_retention_ms > KEY_RETENTION_MS_MAX {
            return Err(format!(
                "--key-retention-s must be positive and at most {} s",
                KEY_RETENTION_MS_MAX / 1000
            ));
        }
        if let Some(url) = &self.default_callback {
            check_callback(url).map_err(|e| format!("--default-callback: {e}"))?;
        }
        if !(1..=100).contains(&self.webhook_attempts_max) {
            return Err("--webhook-attempts-max must be within 1..=100".into());
        }
        if self.webhook_timeout_ms == 0 {
            return Err("--webhook-timeout-ms must be positive".into());
        }
        if self.webhook_backoff_base_ms == 0
            || self.webhook_backoff_base_ms > self.webhook_backoff_cap_ms
        {
            return Err(
                "--webhook-backoff-base-ms must be positive and at most --webhook-backoff-cap-ms"
                    .into(),
            );
        }
        if !(1..=1024).contains(&self.webhook_concurrency_max) {
            return Err("--webhook-concurrency-max must be within 1..=1024".into());
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.request_bytes_max) {
            return Err("--request-bytes-max must be within 1 KiB..=16 MiB".into());
        }
        if !(1..=100_000_000).contains(&self.keys_max) {
            return Err("--keys-max must be within 1..=100000000".into());
        }
        if let Some(burst) = self.rate_burst {
            if self.rate_limit.is_none() {
                return Err("--rate-burst needs --rate-limit".into());
            }
            if !(1..=RATE_BURST_MAX).contains(&burst) {
                return Err(format!(
                    "--rate-burst must be within 1..={RATE_BURST_MAX}, got {burst}"
                ));
            }
        }
        Ok(())
    }
}

fn check_secret(flag: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 1024 {
        return Err(format!("{flag} must be 1..=1024 characters"));
    }
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{flag} must be printable ASCII without spaces (it travels in an HTTP header)"
        ));
    }
    Ok(())
}

/// Checks a webhook destination: an absolute `http` or `https` URL.
pub fn check_callback(url: &str) -> Result<(), String> {
    if url.len() > CALLBACK_BYTES_MAX {
        return Err(format!(
            "status_callback is longer than {CALLBACK_BYTES_MAX} bytes"
        ));
    }
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("status_callback is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err("status_callback must be an http:// or https:// URL with a host".into());
    }
    Ok(())
}

/// A rate of sends, `--rate-limit`: `N/s` or a plain `N`, sends a second,
/// above 0 and at most [`RATE_LIMIT_PER_S_MAX`], in steps of 0.001 (one
/// send in 1000 s is the slowest). It is held as a whole number of
/// thousandths of a send a second, so the bucket metering it counts in
/// integers and admits exactly what the rate allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendRate {
    milli_per_s: u64,
}

impl SendRate {
    /// `n` sends a second, if it is a rate the fake can meter.
    pub fn per_s(n: f64) -> Result<SendRate, String> {
        if !n.is_finite() {
            return Err(format!("the rate must be a finite number, got {n}"));
        }
        if n <= 0.0 {
            return Err(format!(
                "the rate must be above 0 sends a second, got {n} (leave --rate-limit out for no limit)"
            ));
        }
        if n > RATE_LIMIT_PER_S_MAX {
            return Err(format!(
                "the rate must be at most {RATE_LIMIT_PER_S_MAX} sends a second, got {n}"
            ));
        }
        let milli = n * 1000.0;
        let whole = milli.round();
        if whole < 1.0 || (milli - whole).abs() > 1e-6 * whole {
            return Err(format!(
                "the rate must be a multiple of 0.001 sends a second, got {n}"
            ));
        }
        Ok(SendRate {
            // Within 1..=1e8 by the checks above: the cast is exact.
            milli_per_s: whole as u64,
        })
    }

    /// Thousandths of a send a second.
    pub fn milli_per_s(self) -> u64 {
        self.milli_per_s
    }

    /// One second's worth of sends, rounded up, at least 1: the burst when
    /// `--rate-burst` is not given.
    pub fn default_burst(self) -> u32 {
        let burst = self.milli_per_s.div_ceil(1000).max(1);
        // At most RATE_LIMIT_PER_S_MAX, which fits.
        u32::try_from(burst).unwrap_or(RATE_BURST_MAX)
    }
}

impl fmt::Display for SendRate {
    /// The syntax it is read from: `50/s`, `0.5/s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, milli) = (self.milli_per_s / 1000, self.milli_per_s % 1000);
        if milli == 0 {
            write!(f, "{whole}/s")
        } else {
            let frac = format!("{milli:03}");
            write!(f, "{whole}.{}/s", frac.trim_end_matches('0'))
        }
    }
}

impl FromStr for SendRate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n = s.strip_suffix("/s").unwrap_or(s);
        let per_s: f64 = n.parse().map_err(|_| {
            format!("expected N/s or a plain N (sends a second), e.g. 50/s; got {s:?}")
        })?;
        SendRate::per_s(per_s)
    }
}

/// Which provider the fake speaks as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// courier's own provider contract (`docs/provider-api.md`).
    #[default]
    Contract,
    /// Twilio's Messages API (tier c: run with --ignore-key --no-lookup).
    Twilio,
    /// Telnyx's `POST /v2/messages` (tier c: run with --ignore-key --no-lookup).
    Telnyx,
    /// Infobip's SMS v3 with idempotent sending (tier a: the default modes).
    Infobip,
}

impl Dialect {
    pub const ALL: [Dialect; 4] = [
        Dialect::Contract,
        Dialect::Twilio,
        Dialect::Telnyx,
        Dialect::Infobip,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Contract => "contract",
            Dialect::Twilio => "twilio",
            Dialect::Telnyx => "telnyx",
            Dialect::Infobip => "infobip",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
                format!("unknown dialect {s:?}: one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_syntax_parses_and_bad_forms_are_refused() {
        assert_eq!("0".parse::<Latency>(), Ok(Latency::ZERO));
        assert_eq!("25".parse::<Latency>(), Ok(Latency::Fixed { ms: 25 }));
        assert_eq!(
            "uniform:5..50".parse::<Latency>(),
            Ok(Latency::Uniform {
                min_ms: 5,
                max_ms: 50
            })
        );
        assert_eq!(
            "lognormal:median=20,sigma=0.6".parse::<Latency>(),
            Ok(Latency::LogNormal {
                median_ms: 20.0,
                sigma: 0.6
            })
        );
        for bad in [
            "",
            "-1",
            "fast",
            "uniform:50..5",
            "uniform:5",
            "uniform:1..9999999",
            "lognormal:median=20",
            "lognormal:median=0,sigma=1",
            "lognormal:median=20,sigma=9",
            "lognormal:mean=20,sigma=1",
        ] {
            assert!(bad.parse::<Latency>().is_err(), "{bad:?} was accepted");
        }
        // Display writes the syntax it reads.
        for text in ["0", "uniform:5..50", "lognormal:median=20,sigma=0.6"] {
            let l: Latency = text.parse().unwrap();
            assert_eq!(l.to_string().parse::<Latency>(), Ok(l));
        }
    }

    #[test]
    fn latency_draws_stay_in_their_distribution() {
        let u = Latency::Uniform {
            min_ms: 5,
            max_ms: 50,
        };
        let lo = Latency::LogNormal {
            median_ms: 20.0,
            sigma: 0.6,
        };
        let mut draws = Vec::new();
        for i in 0..1000 {
            let a = (i as f64 + 0.5) / 1000.0;
            let b = ((i * 7919) % 1000) as f64 / 1000.0;
            let v = u.sample_ms(a, b);
            assert!((5..=50).contains(&v), "{v}");
            draws.push(lo.sample_ms(a, b));
        }
        draws.sort_unstable();
        let median = draws[500];
        assert!((15..=25).contains(&median), "median {median}");
        assert_eq!(u.sample_ms(0.0, 0.0), 5);
        assert_eq!(u.sample_ms(0.999_999, 0.0), 50);
    }

    #[test]
    fn ranges_parse_and_sample_inclusively() {
        assert_eq!("20..200".parse::<MsRange>(), Ok(MsRange::new(20, 200)));
        assert_eq!("7".parse::<MsRange>(), Ok(MsRange::new(7, 7)));
        assert!("9..1".parse::<MsRange>().is_err());
        assert!("a..b".parse::<MsRange>().is_err());
        let r = MsRange::new(1, 3);
        assert_eq!(r.sample(0.0), 1);
        assert_eq!(r.sample(0.5), 2);
        assert_eq!(r.sample(0.9999), 3);
    }

    /// The valid defaults with one setting changed.
    fn with(edit: impl FnOnce(&mut FakeConfig)) -> FakeConfig {
        let mut cfg = FakeConfig::new("p.jsonl", "key", "secret");
        edit(&mut cfg);
        cfg
    }

    #[test]
    fn defaults_are_valid_and_bad_settings_name_their_flag() {
        assert_eq!(with(|_| {}).validate(), Ok(()));
        let cases: Vec<(FakeConfig, &str)> = vec![
            (FakeConfig::new("p.jsonl", "", "s"), "--api-key"),
            (FakeConfig::new("p.jsonl", "a key", "s"), "--api-key"),
            (FakeConfig::new("p.jsonl", "k", ""), "--webhook-secret"),
            (with(|c| c.faults.timeout = 1.5), "--timeout-rate"),
            (
                with(|c| c.faults.late_failed = f64::NAN),
                "--late-failed-rate",
            ),
            (with(|c| c.key_retention_ms = 0), "--key-retention-s"),
            (
                with(|c| c.default_callback = Some("ftp://x/".into())),
                "--default-callback",
            ),
            (
                with(|c| c.webhook_attempts_max = 0),
                "--webhook-attempts-max",
            ),
            (
                with(|c| c.webhook_backoff_base_ms = 5_000),
                "--webhook-backoff-base-ms",
            ),
            (with(|c| c.request_bytes_max = 10), "--request-bytes-max"),
            (
                with(|c| c.timeout_hold_ms = DELAY_MS_MAX + 1),
                "--timeout-hold-ms",
            ),
            (
                with(|c| {
                    c.lookup = false;
                    c.lookup_lag_ms = 100;
                }),
                "--no-lookup",
            ),
            (with(|c| c.rate_burst = Some(5)), "--rate-limit"),
            (
                with(|c| {
                    c.rate_limit = Some(SendRate::per_s(10.0).unwrap());
                    c.rate_burst = Some(0);
                }),
                "--rate-burst",
            ),
            (
                with(|c| {
                    c.rate_limit = Some(SendRate::per_s(10.0).unwrap());
                    c.rate_burst = Some(RATE_BURST_MAX + 1);
                }),
                "--rate-burst",
            ),
        ];
        for (cfg, flag) in cases {
            let err = cfg.validate().expect_err(flag);
            assert!(err.contains(flag), "{err:?} does not name {flag}");
        }
    }

    #[test]
    fn each_tier_sets_its_two_modes_and_is_named_back() {
        let mut cfg = with(|_| {});
        assert_eq!(cfg.tier(), "a", "the defaults are the contract");
        for (name, ignore_key, lookup) in [
            ("a-", false, false),
            ("b", true, true),
            ("c", true, false),
            ("a", false, true),
        ] {
            cfg.set_tier(name).unwrap();
            assert_eq!((cfg.ignore_key, cfg.lookup), (ignore_key, lookup), "{name}");
            assert_eq!(cfg.tier(), name);
            assert_eq!(cfg.validate(), Ok(()), "{name}");
        }
        assert!(cfg.set_tier("c-resend").is_err());
    }

    #[test]
    fn rate_limit_syntax_parses_and_bad_rates_are_refused() {
        let milli = |s: &str| s.parse::<SendRate>().map(SendRate::milli_per_s);
        assert_eq!(milli("50/s"), Ok(50_000));
        assert_eq!(milli("50"), Ok(50_000));
        assert_eq!(milli("0.5/s"), Ok(500));
        assert_eq!(milli("33.3"), Ok(33_300));
        assert_eq!(milli("0.001/s"), Ok(1));
        assert_eq!(milli("100000/s"), Ok(100_000_000));
        for (bad, why) in [
            ("0", "above 0"),
            ("0/s", "above 0"),
            ("-1", "above 0"),
            ("-0.5/s", "above 0"),
            ("NaN", "finite"),
            ("inf/s", "finite"),
            ("-inf", "finite"),
            ("100000.001", "at most"),
            ("1e9/s", "at most"),
            ("0.0004", "multiple of 0.001"),
            ("0.0015/s", "multiple of 0.001"),
            ("", "N/s"),
            ("50/m", "N/s"),
            ("50 /s", "N/s"),
            ("fast", "N/s"),
        ] {
            let err = bad.parse::<SendRate>().expect_err(bad);
            assert!(err.contains(why), "{bad:?}: {err:?}");
        }
        // Display writes the syntax it reads.
        for text in ["50/s", "0.5/s", "33.3/s", "0.001/s", "100000/s", "1.25/s"] {
            let r: SendRate = text.parse().unwrap();
            assert_eq!(r.to_string(), text);
        }
    }

    #[test]
    fn the_default_burst_is_one_seconds_worth_rounded_up_and_at_least_one() {
        let burst = |s: &str| s.parse::<SendRate>().unwrap().default_burst();
        assert_eq!(burst("50/s"), 50);
        assert_eq!(burst("33.3/s"), 34);
        assert_eq!(burst("0.5/s"), 1);
        assert_eq!(burst("0.001/s"), 1);
        assert_eq!(burst("100000/s"), RATE_BURST_MAX);
        let rate: SendRate = "2.5/s".parse().unwrap();
        let mut cfg = with(|c| c.rate_limit = Some(rate));
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.send_limit(), Some((rate, 3)));
        cfg.rate_burst = Some(7);
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.send_limit(), Some((rate, 7)));
        assert_eq!(with(|_| {}).send_limit(), None);
    }

    #[test]
    fn callbacks_must_be_http_urls() {
        assert!(check_callback("http://127.0.0.1:9/hook").is_ok());
        assert!(check_callback("https://example.com/x").is_ok());
        assert!(check_callback("not a url").is_err());
        assert!(check_callback("mailto:a@b").is_err());
        assert!(check_callback(&format!("http://h/{}", "a".repeat(3000))).is_err());
    }
}
