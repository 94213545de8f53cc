//! The adapter's settings: the harness's environment, read once, with a
//! limit on everything, checked once in [`Config::validate`].

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
            idle_poll_ms: num("COURIER_IDLE_POLL_MS", 20)?,
            stub_record,
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
        Ok(())
    }
}

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
        ] {
            let e = from(&pairs).unwrap_err();
            assert!(e.0.contains(word), "{word}: {e}");
        }
    }
}
