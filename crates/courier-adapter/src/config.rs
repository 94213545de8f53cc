//! The adapter's settings: the harness's environment, read once, with a
//! limit on everything, checked once in [`Config::validate`].
//!
//! Besides the contract's variables it reads the optional knobs the harness
//! forwards (`adapters.py`'s `_base_env`): those courier can honour become
//! settings ([`FailPlan`], the lease, the stores); those it cannot are kept
//! by name in [`Config::not_honoured`], warned about at start and named in
//! the descriptor, never silently dropped.

use courier_core::Limits;
use std::path::PathBuf;

/// How the producer decides how many jobs to insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerMode {
    /// `PRODUCER_RATE` jobs a second, credited on real elapsed time.
    Fixed,
    /// Keep about `TARGET_DEPTH` jobs pending (the harness's diagnostic mode).
    DepthTarget,
}

/// Who paces a fixed-rate producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// The adapter's own clock (`PRODUCER_PACING=adapter`).
    Adapter,
    /// `ENQUEUE <n>` lines from the harness on stdin (`PRODUCER_PACING=harness`,
    /// the harness's default); the adapter's own clock again if stdin ends.
    Harness,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub database_url: String,
    /// The database's name, from the URL (the descriptor's `db_name`).
    pub db_name: String,
    pub mode: ProducerMode,
    pub pacing: Pacing,
    pub producer_rate_per_s: u64,
    pub producer_batch_max: usize,
    pub producer_batch_ms: u64,
    pub target_depth: u64,
    /// Deliveries at once: the worker's `worker_concurrency_max`.
    pub worker_count: u32,
    pub job_payload_bytes: usize,
    pub job_work_ms: u64,
    pub sample_every_s: u64,
    /// The rolling window of the claim percentiles.
    pub latency_window_s: u64,
    pub instance_id: u32,
    /// How long the idle worker waits before claiming again
    /// (`COURIER_IDLE_POLL_MS`; `courier worker`'s default).
    pub idle_poll_ms: u64,
    /// The stub provider's record (its messages, shared across restarts).
    pub stub_record: PathBuf,
    /// `PRODUCER_RATE_CONTROL_FILE`: a decimal jobs/s that, when present
    /// and readable, replaces `PRODUCER_RATE` (re-read while running).
    pub rate_control_file: Option<PathBuf>,
    /// `WORKER_FAIL_MODE`, `JOB_FAIL_FIRST_MOD`, `JOB_MAX_ATTEMPTS`.
    pub fail: FailPlan,
    /// `LEASE_DEADLINE_MS`: the worker's `lease_ttl_ms` (courier's default
    /// when unset).
    pub lease_ttl_ms: Option<u64>,
    /// `BENCH_QUEUE_COUNT`: the jobs are spread over this many stores
    /// (courier's unit of fairness), round-robin.
    pub queue_count: u32,
    /// Set knobs courier cannot honour, each with the reason.
    pub not_honoured: Vec<(&'static str, &'static str)>,
}

/// What the synthetic provider does with a job's requests (the harness's
/// `WORKER_FAIL_MODE`, `JOB_FAIL_FIRST_MOD` and `JOB_MAX_ATTEMPTS`, in
/// courier's terms: a retryable failure is an answer that leaves the
/// outcome unknown, which courier looks up and sends again; a terminal
/// failure is a refusal, after which courier marks the action failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailPlan {
    pub mode: FailMode,
    /// Every job whose sequence number is a multiple of this (0: none) is
    /// marked to fail its first attempt.
    pub fail_first_mod: u64,
    /// A marked job's failing request that is its `max_attempts`-th is a
    /// refusal instead: the job has no attempt left.
    pub max_attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Marked jobs fail their first attempt (retryably); the rest succeed.
    /// awa's `success` and `retryable-first` both behave so.
    MarkedFailFirst,
    /// Every request is refused.
    RefuseAll,
}

impl FailPlan {
    /// Whether any request can fail.
    pub fn active(&self) -> bool {
        self.mode == FailMode::RefuseAll || self.fail_first_mod > 0
    }

    /// Whether the job with sequence number `seq` is marked.
    pub fn marks(&self, seq: u64) -> bool {
        self.fail_first_mod > 0 && seq.is_multiple_of(self.fail_first_mod)
    }
}

/// A setting the adapter cannot run with; the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting: {0}")]
pub struct ConfigError(pub String);

/// The longest message body the provider contract allows, in characters.
pub const JOB_PAYLOAD_BYTES_MAX: usize = 1_600;
/// The set form's own ceiling ([`courier_core::ENQUEUE_MANY_MAX`]).
const PRODUCER_BATCH_MAX_LIMIT: usize = courier_core::ENQUEUE_MANY_MAX as usize;
const WORKER_COUNT_MAX: u32 = 4_096;
const QUEUE_COUNT_MAX: u32 = 1_000;
const JOB_MAX_ATTEMPTS_MAX: u32 = 1_000;
/// The knobs the harness may forward that courier cannot honour, and why.
const NOT_HONOURED: &[(&str, &str)] = &[
    (
        "JOB_PRIORITY_PATTERN",
        "courier has no job priorities yet: every job is claimed by its store's fairness, oldest first",
    ),
    (
        "PRIORITY_AGING_MS",
        "courier has no job priorities yet, so nothing to age",
    ),
    (
        "BENCH_DLQ_ENABLED",
        "courier has no dead-letter queue to switch: a refused action is kept as failed, with its reason, until the pruner's retention",
    ),
];

impl Config {
    /// Reads the settings from `var` (the environment in `main`, a map in tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let num = |name: &str, default: u64| -> Result<u64, ConfigError> {
            match var(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| ConfigError(format!("{name}={v:?} is not a whole number"))),
            }
        };
        let database_url =
            var("DATABASE_URL").ok_or_else(|| ConfigError("DATABASE_URL is not set".into()))?;
        let scenario = var("SCENARIO").unwrap_or_else(|| "long_horizon".into());
        if scenario != "long_horizon" {
            return Err(ConfigError(format!(
                "SCENARIO={scenario:?}: only long_horizon is implemented"
            )));
        }
        let mode = match var("PRODUCER_MODE").as_deref().unwrap_or("fixed") {
            "fixed" => ProducerMode::Fixed,
            "depth-target" => ProducerMode::DepthTarget,
            other => {
                return Err(ConfigError(format!(
                    "PRODUCER_MODE={other:?} (fixed | depth-target)"
                )))
            }
        };
        let pacing = match var("PRODUCER_PACING").as_deref().unwrap_or("adapter") {
            "adapter" => Pacing::Adapter,
            "harness" => Pacing::Harness,
            other => {
                return Err(ConfigError(format!(
                    "PRODUCER_PACING={other:?} (adapter | harness)"
                )))
            }
        };
        let db_name = db_name(&database_url);
        let stub_record = match var("COURIER_STUB_RECORD") {
            Some(p) => PathBuf::from(p),
            None => default_record(&database_url, &db_name),
        };
        let fail = FailPlan {
            mode: match var("WORKER_FAIL_MODE")
                .map(|m| m.trim().to_ascii_lowercase().replace('_', "-"))
                .as_deref()
            {
                None | Some("success" | "retryable-first") => FailMode::MarkedFailFirst,
                Some("terminal-always") => FailMode::RefuseAll,
                Some(other) => {
                    return Err(ConfigError(format!(
                        "WORKER_FAIL_MODE={other:?} (success | retryable-first | terminal-always)"
                    )))
                }
            },
            fail_first_mod: num("JOB_FAIL_FIRST_MOD", 0)?,
            max_attempts: u32::try_from(num("JOB_MAX_ATTEMPTS", 25)?).unwrap_or(u32::MAX),
        };
        let lease_ttl_ms = match var("LEASE_DEADLINE_MS") {
            None => None,
            Some(_) => Some(num("LEASE_DEADLINE_MS", 0)?),
        };
        let not_honoured = NOT_HONOURED
            .iter()
            .filter(|(name, _)| var(name).is_some())
            .copied()
            .collect();
        let cfg = Config {
            db_name,
            database_url,
            mode,
            pacing,
            producer_rate_per_s: num("PRODUCER_RATE", 800)?,
            producer_batch_max: num("PRODUCER_BATCH_MAX", 128)? as usize,
            producer_batch_ms: num("PRODUCER_BATCH_MS", 25)?,
            target_depth: num("TARGET_DEPTH", 1_000)?,
            worker_count: u32::try_from(num("WORKER_COUNT", 32)?).unwrap_or(u32::MAX),
            job_payload_bytes: num("JOB_PAYLOAD_BYTES", 256)? as usize,
            job_work_ms: num("JOB_WORK_MS", 1)?,
            sample_every_s: num("SAMPLE_EVERY_S", 5)?,
            latency_window_s: num("LATENCY_WINDOW_S", 30)?,
            instance_id: u32::try_from(num("BENCH_INSTANCE_ID", 0)?).unwrap_or(u32::MAX),
            idle_poll_ms: num("COURIER_IDLE_POLL_MS", IDLE_POLL_MS_DEFAULT)?,
            stub_record,
            rate_control_file: var("PRODUCER_RATE_CONTROL_FILE")
                .filter(|p| !p.trim().is_empty())
                .map(PathBuf::from),
            fail,
            lease_ttl_ms,
            queue_count: u32::try_from(num("BENCH_QUEUE_COUNT", 1)?).unwrap_or(u32::MAX),
            not_honoured,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |m: String| Err(ConfigError(m));
        if self.producer_batch_max == 0 || self.producer_batch_max > PRODUCER_BATCH_MAX_LIMIT {
            return fail(format!(
                "PRODUCER_BATCH_MAX must be within 1..={PRODUCER_BATCH_MAX_LIMIT}"
            ));
        }
        if self.producer_batch_ms == 0 || self.producer_batch_ms > 10_000 {
            return fail("PRODUCER_BATCH_MS must be within 1..=10000".into());
        }
        if self.worker_count == 0 || self.worker_count > WORKER_COUNT_MAX {
            return fail(format!(
                "WORKER_COUNT must be within 1..={WORKER_COUNT_MAX}"
            ));
        }
        if self.job_payload_bytes == 0 || self.job_payload_bytes > JOB_PAYLOAD_BYTES_MAX {
            return fail(format!(
                "JOB_PAYLOAD_BYTES must be within 1..={JOB_PAYLOAD_BYTES_MAX} (the provider contract's body limit)"
            ));
        }
        if self.job_work_ms > 60_000 {
            return fail("JOB_WORK_MS must be at most 60000".into());
        }
        if self.sample_every_s == 0 || self.sample_every_s > 3_600 {
            return fail("SAMPLE_EVERY_S must be within 1..=3600".into());
        }
        if self.idle_poll_ms == 0 || self.idle_poll_ms > 10_000 {
            return fail("COURIER_IDLE_POLL_MS must be within 1..=10000".into());
        }
        if self.latency_window_s == 0 || self.latency_window_s > 3_600 {
            return fail("LATENCY_WINDOW_S must be within 1..=3600".into());
        }
        if self.queue_count == 0 || self.queue_count > QUEUE_COUNT_MAX {
            return fail(format!(
                "BENCH_QUEUE_COUNT must be within 1..={QUEUE_COUNT_MAX}"
            ));
        }
        if self.fail.max_attempts == 0 || self.fail.max_attempts > JOB_MAX_ATTEMPTS_MAX {
            return fail(format!(
                "JOB_MAX_ATTEMPTS must be within 1..={JOB_MAX_ATTEMPTS_MAX}"
            ));
        }
        if let Err(e) = self.limits().validate() {
            // Only the lease comes from the harness; the rest is courier's default.
            return fail(format!(
                "LEASE_DEADLINE_MS={}: courier cannot run with this lease ({e}); \
                 courier always rescues an expired lease, so 0 cannot turn it off",
                self.lease_ttl_ms.unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// The worker's limits: `courier worker`'s defaults, except that every
    /// delivery may be of one store (`--store-in-flight-max`: the harness
    /// runs one queue, and courier's default of 4 per store would cap
    /// `WORKER_COUNT` at 4), `WORKER_COUNT` deliveries at once
    /// (`--concurrency`), and the lease of `LEASE_DEADLINE_MS` when set
    /// (`--lease-ttl-ms`). [`Config::differs_from_courier_worker`] names them.
    pub fn limits(&self) -> Limits {
        let defaults = Limits::default();
        Limits {
            worker_concurrency_max: self.worker_count,
            store_in_flight_max: self.worker_count,
            lease_ttl_ms: self.lease_ttl_ms.unwrap_or(defaults.lease_ttl_ms),
            ..defaults
        }
    }

    /// The settings of the adapter's worker that differ from `courier
    /// worker`'s defaults, as that command's flags, with their values.
    pub fn differs_from_courier_worker(&self) -> Vec<(&'static str, String)> {
        let (ours, defaults) = (self.limits(), Limits::default());
        let mut out = Vec::new();
        if ours.worker_concurrency_max != defaults.worker_concurrency_max {
            out.push(("--concurrency", ours.worker_concurrency_max.to_string()));
        }
        if ours.store_in_flight_max != defaults.store_in_flight_max {
            out.push((
                "--store-in-flight-max",
                ours.store_in_flight_max.to_string(),
            ));
        }
        if ours.lease_ttl_ms != defaults.lease_ttl_ms {
            out.push(("--lease-ttl-ms", ours.lease_ttl_ms.to_string()));
        }
        if self.idle_poll_ms != IDLE_POLL_MS_DEFAULT {
            out.push(("--idle-poll-ms", self.idle_poll_ms.to_string()));
        }
        // The stub sends no webhooks, so no action ever reaches a final
        // status: a reconciler would look up every job again after
        // `final_overdue_ms`, work a deployment's webhooks spare it.
        out.push(("--no-reconcile", String::new()));
        out
    }
}

/// `courier worker --idle-poll-ms`'s default.
const IDLE_POLL_MS_DEFAULT: u64 = 20;

/// The last path segment of a database URL, without its query.
fn db_name(url: &str) -> String {
    let tail = url.rsplit('/').next().unwrap_or("");
    let name = tail.split('?').next().unwrap_or("");
    if name.is_empty() {
        "courier_bench".into()
    } else {
        name.into()
    }
}

/// The record's default place: one file per database URL under the temp
/// directory, so every replica and every restart against one database finds
/// the same record.
fn default_record(url: &str, db_name: &str) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    url.hash(&mut h);
    std::env::temp_dir().join(format!(
        "courier-adapter-{db_name}-{:016x}.stub",
        h.finish()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_the_contracts() {
        let c = from(&[(
            "DATABASE_URL",
            "postgres://u@h:1/courier_bench?sslmode=disable",
        )])
        .unwrap();
        assert_eq!(c.db_name, "courier_bench");
        assert_eq!((c.mode, c.pacing), (ProducerMode::Fixed, Pacing::Adapter));
        assert_eq!(
            (
                c.producer_rate_per_s,
                c.producer_batch_max,
                c.producer_batch_ms
            ),
            (800, 128, 25)
        );
        assert_eq!(
            (
                c.worker_count,
                c.job_payload_bytes,
                c.job_work_ms,
                c.sample_every_s
            ),
            (32, 256, 1, 5)
        );
        assert_eq!(c.target_depth, 1_000);
    }

    /// The optional knobs: honoured as settings, or named as not honoured;
    /// the worker's differences from `courier worker` named as its flags.
    #[test]
    fn knobs_become_settings_or_are_named() {
        let c = from(&[
            ("DATABASE_URL", "postgres://h/db"),
            ("WORKER_COUNT", "64"),
            ("WORKER_FAIL_MODE", "retryable_first"),
            ("JOB_FAIL_FIRST_MOD", "10"),
            ("JOB_MAX_ATTEMPTS", "3"),
            ("LEASE_DEADLINE_MS", "10000"),
            ("BENCH_QUEUE_COUNT", "4"),
            ("JOB_PRIORITY_PATTERN", "1,4"),
            ("BENCH_DLQ_ENABLED", "1"),
            ("PRODUCER_RATE_CONTROL_FILE", "/tmp/rate"),
        ])
        .unwrap();
        assert_eq!(
            c.fail,
            FailPlan {
                mode: FailMode::MarkedFailFirst,
                fail_first_mod: 10,
                max_attempts: 3
            }
        );
        assert!(c.fail.marks(20) && !c.fail.marks(21));
        assert_eq!((c.lease_ttl_ms, c.queue_count), (Some(10_000), 4));
        assert_eq!(c.rate_control_file, Some(PathBuf::from("/tmp/rate")));
        let named: Vec<&str> = c.not_honoured.iter().map(|(k, _)| *k).collect();
        assert_eq!(named, ["JOB_PRIORITY_PATTERN", "BENCH_DLQ_ENABLED"]);
        let flags: Vec<&str> = c
            .differs_from_courier_worker()
            .iter()
            .map(|(f, _)| *f)
            .collect();
        assert_eq!(
            flags,
            [
                "--concurrency",
                "--store-in-flight-max",
                "--lease-ttl-ms",
                "--no-reconcile"
            ]
        );
        let plain = from(&[("DATABASE_URL", "postgres://h/db")]).unwrap();
        assert!(!plain.fail.active() && plain.not_honoured.is_empty());
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let url = ("DATABASE_URL", "postgres://h/db");
        for (pairs, word) in [
            (vec![], "DATABASE_URL"),
            (vec![url, ("SCENARIO", "bulk")], "SCENARIO"),
            (vec![url, ("PRODUCER_MODE", "burst")], "PRODUCER_MODE"),
            (vec![url, ("PRODUCER_PACING", "x")], "PRODUCER_PACING"),
            (vec![url, ("PRODUCER_RATE", "fast")], "PRODUCER_RATE"),
            (vec![url, ("PRODUCER_BATCH_MAX", "0")], "PRODUCER_BATCH_MAX"),
            (vec![url, ("WORKER_COUNT", "0")], "WORKER_COUNT"),
            (
                vec![url, ("JOB_PAYLOAD_BYTES", "1601")],
                "JOB_PAYLOAD_BYTES",
            ),
            (vec![url, ("SAMPLE_EVERY_S", "0")], "SAMPLE_EVERY_S"),
            (
                vec![url, ("WORKER_FAIL_MODE", "sometimes")],
                "WORKER_FAIL_MODE",
            ),
            (vec![url, ("JOB_MAX_ATTEMPTS", "0")], "JOB_MAX_ATTEMPTS"),
            (vec![url, ("BENCH_QUEUE_COUNT", "0")], "BENCH_QUEUE_COUNT"),
            // courier cannot turn lease rescue off, nor beat its own request
            // time-out (2 s) and send margin (0.5 s) with a shorter lease.
            (vec![url, ("LEASE_DEADLINE_MS", "0")], "LEASE_DEADLINE_MS"),
            (
                vec![url, ("LEASE_DEADLINE_MS", "2000")],
                "LEASE_DEADLINE_MS",
            ),
        ] {
            let e = from(&pairs).unwrap_err();
            assert!(e.0.contains(word), "{word}: {e}");
        }
    }
}
