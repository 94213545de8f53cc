//! The adapter's telemetry: JSONL records on stdout, one per line, as the
//! harness's contract (`CONTRIBUTING_ADAPTERS.md`) describes them.
//!
//! # Invariants
//! - stdout carries only these records; logs go to stderr.
//! - Each record is written with one `write` of a whole line and flushed,
//!   so a reader that tails the pipe never sees half a record, and a
//!   SIGKILL loses at most the record being written.

use serde_json::{json, Value};
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The system's name in the harness.
pub const SYSTEM: &str = "courier";

/// The tables the harness should watch for bloat (`adapter.json` lists the
/// same; a test checks that they agree and that each exists).
pub const EVENT_TABLES: &[&str] = &[
    "public.actions",
    "public.actions_ready",
    "public.actions_held",
    "public.actions_done",
    "public.outbox",
    "public.outbox_accepts",
    "public.intents_watched",
    "public.stores",
    "public.store_releases",
    "public.store_work",
    "public.events",
    "public.webhook_events",
    "public.counts",
    "public.count_deltas",
];

/// The indexes of those tables, likewise.
pub const EVENT_INDEXES: &[&str] = &[
    "public.actions_pkey",
    "public.actions_uid_key",
    "public.actions_store_client_key",
    "public.actions_ready_pkey",
    "public.actions_ready_store",
    "public.actions_held_pkey",
    "public.actions_held_lease",
    "public.actions_done_pkey",
    "public.outbox_pkey",
    "public.outbox_idem_key_key",
    "public.outbox_accepts_pkey",
    "public.intents_watched_pkey",
    "public.intents_watched_open",
    "public.intents_watched_next_check",
    "public.stores_pkey",
    "public.store_releases_pkey",
    "public.store_releases_store",
    "public.store_work_pkey",
    "public.store_work_order",
    "public.events_pkey",
    "public.events_kind_id",
    "public.webhook_events_pkey",
    "public.webhook_events_received",
    "public.counts_pkey",
];

/// The metrics a tick carries whenever they can be read (the contract's
/// required set; see [`crate::Sampler`] for when one is left out).
pub const REQUIRED_METRICS: &[&str] = &[
    "claim_p50_ms",
    "claim_p95_ms",
    "claim_p99_ms",
    "enqueue_rate",
    "completion_rate",
    "queue_depth",
];

/// Writes one record as one line.
pub fn emit(record: &Value) {
    let mut line = record.to_string();
    line.push('\n');
    let mut out = std::io::stdout().lock();
    // A closed stdout (the harness went away) is not ours to handle.
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

/// A wall-clock time since the Unix epoch as the contract writes it:
/// RFC 3339, UTC, milliseconds.
pub fn iso(since_epoch: Duration) -> String {
    let t = chrono::DateTime::<chrono::Utc>::from_timestamp(
        since_epoch.as_secs() as i64,
        since_epoch.subsec_nanos(),
    )
    .unwrap_or_default();
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

pub fn now_since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// The startup record. Beyond the contract's fields it names the
/// worker's settings that differ from `courier worker`'s defaults (as that
/// command's flags) and the harness knobs that were set but cannot be
/// honoured, with the reason (the harness records the descriptor in
/// `manifest.json`).
pub fn descriptor(
    db_name: &str,
    instance_id: u32,
    schema_version: i32,
    differs: &[(&str, String)],
    not_honoured: &[(&str, &str)],
) -> Value {
    let differs: serde_json::Map<String, Value> = differs
        .iter()
        .map(|(flag, v)| (flag.to_string(), Value::from(v.as_str())))
        .collect();
    let not_honoured: serde_json::Map<String, Value> = not_honoured
        .iter()
        .map(|(knob, why)| (knob.to_string(), Value::from(*why)))
        .collect();
    json!({
        "kind": "descriptor",
        "system": SYSTEM,
        "instance_id": instance_id,
        "event_tables": EVENT_TABLES,
        "event_indexes": EVENT_INDEXES,
        "extensions": [],
        "version": env!("CARGO_PKG_VERSION"),
        "schema_version": schema_version.to_string(),
        "db_name": db_name,
        "started_at": iso(now_since_epoch()),
        "worker": "courier worker",
        "worker_differs_from_defaults": differs,
        "not_honoured": not_honoured,
    })
}

/// One sample of one metric at tick `t`.
pub fn sample(t: &str, instance_id: u32, metric: &str, value: f64, window_s: f64) -> Value {
    json!({
        "t": t,
        "system": SYSTEM,
        "instance_id": instance_id,
        "kind": "adapter",
        "subject_kind": "adapter",
        "subject": "",
        "metric": metric,
        "value": value,
        "window_s": window_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(
            iso(Duration::from_millis(1_776_416_410_000)),
            "2026-04-17T09:00:10.000Z"
        );
    }

    #[test]
    fn records_carry_the_contracts_fields() {
        let d = descriptor(
            "courier_bench",
            0,
            4,
            &[("--concurrency", "64".into())],
            &[("JOB_PRIORITY_PATTERN", "no priorities")],
        );
        assert_eq!(d["worker_differs_from_defaults"]["--concurrency"], "64");
        assert_eq!(d["not_honoured"]["JOB_PRIORITY_PATTERN"], "no priorities");
        for k in [
            "system",
            "event_tables",
            "extensions",
            "version",
            "schema_version",
            "db_name",
            "started_at",
        ] {
            assert!(d.get(k).is_some(), "descriptor lacks {k}");
        }
        let s = sample("2026-04-17T09:00:10.000Z", 0, "claim_p99_ms", 4.2, 30.0);
        assert_eq!(s["kind"], "adapter");
        assert_eq!(s["subject_kind"], "adapter");
        assert_eq!(s["window_s"], 30.0);
    }
}
