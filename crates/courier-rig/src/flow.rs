//! Flow control in a chaos run ([`FlowSpec`]): stores given a rate, the
//! fake provider given a rate limit of its own, and what the provider's log
//! shows of both ([`FlowDone`]).
//!
//! Read from the provider's log, never from courier's database:
//! - [`pacing`]: a rated store's messages created in any window of 1 s and
//!   of 10 s, against its bucket's bound (`burst + rate * window`);
//! - [`pause_breaches`]: requests that reached the provider while every
//!   worker should have been paused by one of its 429s (from
//!   [`PAUSE_REACH_MS`] after it, time for the pause to reach every worker
//!   process, to 50 ms before its `Retry-After` ends).
//!
//! # Invariants
//! - The windows are slid over every creation, so the maximum is exact for
//!   the log, not sampled.

use crate::RigError;
use chrono::{DateTime, Utc};
use courier_core::rate::{Rate, StoreSettings};
use courier_store::PgStore;
use serde::Serialize;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

/// How long a 429's pause may take to reach every worker process: the
/// write of the worker that got it, then a claim of each other worker
/// (every idle poll) or, for a worker with no room, its read every
/// `REFRESH_BUSY_MS` (250 ms), plus a request already under way. Four
/// clean runs at once on two cores put 3 to 6 requests between 300 and
/// 500 ms after a 429 (claims whose snapshot came before the pause's
/// write, sent late); one run alone, none after 300 ms.
pub const PAUSE_REACH_MS: i64 = 500;

/// What a run does about flow control.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FlowSpec {
    /// The rate the first `rated_stores` stores (`store-000`, ...) are given
    /// before the load begins.
    pub store_rate: Option<Rate>,
    pub rated_stores: usize,
    /// The fake provider's own limit (`courier provider --rate-limit`),
    /// sends a second.
    pub fake_rate_limit: Option<u32>,
    /// DEMONSTRATION ONLY: each worker names a gate of its own, so a 429
    /// pauses only the worker that got it (the negative control of the
    /// shared pause).
    pub unshared_gates: bool,
}

impl FlowSpec {
    /// The stores given a rate.
    pub fn rated(&self) -> Vec<String> {
        match self.store_rate {
            Some(_) => (0..self.rated_stores)
                .map(|s| format!("store-{s:03}"))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Gives the rated stores their rate (through the store, as an
    /// operator's `PUT /v1/stores/{store}` does).
    pub async fn apply(&self, store: &PgStore) -> Result<(), RigError> {
        let Some(rate) = self.store_rate else {
            return Ok(());
        };
        let settings = StoreSettings {
            rate_per_s: Some(rate.per_s),
            burst: Some(rate.burst),
            in_flight_max: None,
        };
        for s in self.rated() {
            store
                .store_configure(&s, &settings, "chaos")
                .await
                .map_err(|e| RigError::Settings(format!("store {s}: {e}")))?;
        }
        Ok(())
    }
}

/// One rated store's pacing, from the provider's log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pacing {
    pub store: String,
    pub rate_per_s: f64,
    pub burst: u32,
    /// Messages created for the store's actions.
    pub created: usize,
    /// From its first creation to its last, in seconds.
    pub span_s: f64,
    /// The most created in any 1 s window, and the bucket's bound for it.
    pub max_1s: usize,
    pub bound_1s: f64,
    pub max_10s: usize,
    pub bound_10s: f64,
}

impl Pacing {
    /// No window holds more than the bucket allows (one more for a window
    /// whose edges a claim and its send straddle).
    pub fn within(&self) -> bool {
        self.max_1s as f64 <= self.bound_1s + 1.0 && self.max_10s as f64 <= self.bound_10s + 1.0
    }
}

/// What the provider's log shows of a run's flow control.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct FlowDone {
    pub pacing: Vec<Pacing>,
    /// Sends the fake answered 429.
    pub rate_limited: usize,
    /// Requests (sends and lookups) that reached the provider inside a
    /// pause that every worker should have kept ([`pause_breaches`]; at
    /// most one for every 20 429s passes, see [`FlowDone::passed`]).
    pub pause_breaches: usize,
    /// Whether the run's verdict includes [`FlowDone::passed`]: only a run
    /// with no faults (none planned, the fake's off), where a send follows
    /// its claim at once; under faults the figures are reported only.
    pub judged: bool,
}

impl FlowDone {
    /// The figures as tables: each rated store's pacing against its
    /// bucket, then the fake's 429s and the requests inside a shared pause.
    pub fn table(&self) -> String {
        let f = self;
        let mut t = String::from(
            "| rated store | rate/s | burst | created | span s | max in 1 s (bound) | max in 10 s (bound) |\n|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for p in &f.pacing {
            t.push_str(&format!(
                "| {} | {} | {} | {} | {:.1} | {} ({:.0}) | {} ({:.0}) |\n",
                p.store,
                p.rate_per_s,
                p.burst,
                p.created,
                p.span_s,
                p.max_1s,
                p.bound_1s,
                p.max_10s,
                p.bound_10s
            ));
        }
        t.push_str(&format!(
            "\n| provider's log | count |\n|---|---:|\n| sends answered 429 by the fake | {} |\n| requests inside a pause every worker should keep | {} |\n| judged (no faults) | {} |\n",
            f.rate_limited, f.pause_breaches, if f.judged { "yes" } else { "no: reported only" }
        ));
        t
    }

    /// Every rated store within its bucket, and the pauses kept: requests
    /// inside a pause at most one for every 20 of the fake's 429s. A
    /// distributed pause is learnt late by a claim whose snapshot came
    /// before the pause was written and whose send a loaded machine then
    /// delays: the whole test suite at once on two cores put 1 request
    /// inside a pause beside 110 429s; workers that share no pause put 84
    /// beside 131.
    pub fn passed(&self) -> bool {
        self.pause_breaches * 20 <= self.rate_limited && self.pacing.iter().all(Pacing::within)
    }
}

/// One line of the provider's log, as flow control reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub at_ms: i64,
    pub op: String,
    pub key: Option<String>,
    pub result: Option<String>,
    pub rate_limited: bool,
}

/// Reads the provider's log (JSON lines; a line it cannot read is skipped,
/// as a torn last line is).
pub fn read_lines(log: &Path) -> Result<Vec<Line>, RigError> {
    let f = std::fs::File::open(log).map_err(|e| RigError::io(log, e))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line.map_err(|e| RigError::io(log, e))?;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(at) = v["at"]
            .as_str()
            .and_then(|s| s.parse::<DateTime<Utc>>().ok())
        else {
            continue;
        };
        out.push(Line {
            at_ms: at.timestamp_millis(),
            op: v["op"].as_str().unwrap_or_default().to_string(),
            key: v["key"].as_str().map(str::to_string),
            result: v["result"].as_str().map(str::to_string),
            rate_limited: v["fault"] == "rate_limited",
        });
    }
    Ok(out)
}

/// The store of every action's key (`courier_core::action_key`).
pub async fn stores_by_key(store: &PgStore) -> Result<HashMap<String, String>, RigError> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT 'courier-' || replace(uid::text, '-', ''), store FROM actions",
            &[],
        )
        .await
        .map_err(courier_store::StoreError::from)?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The most of `times` (sorted, ms) in any window of `window_ms`.
fn max_in_window(times: &[i64], window_ms: i64) -> usize {
    let mut best = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= window_ms {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

/// A rated store's pacing: its creations' times, windowed.
pub fn pacing(lines: &[Line], stores: &HashMap<String, String>, store: &str, rate: Rate) -> Pacing {
    let mut times: Vec<i64> = lines
        .iter()
        .filter(|l| l.op == "send" && l.result.as_deref() == Some("created"))
        .filter(|l| {
            l.key
                .as_ref()
                .and_then(|k| stores.get(k))
                .map(String::as_str)
                == Some(store)
        })
        .map(|l| l.at_ms)
        .collect();
    times.sort_unstable();
    let span_ms = match (times.first(), times.last()) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    };
    let bound = |w_s: f64| f64::from(rate.burst) + rate.per_s * w_s;
    Pacing {
        store: store.to_string(),
        rate_per_s: rate.per_s,
        burst: rate.burst,
        created: times.len(),
        span_s: span_ms as f64 / 1_000.0,
        max_1s: max_in_window(&times, 1_000),
        bound_1s: bound(1.0),
        max_10s: max_in_window(&times, 10_000),
        bound_10s: bound(10.0),
    }
}

/// Requests that reached the provider while every worker should have been
/// paused: for each 429 at `t` with a pause of `pause_ms` (the fake's
/// `Retry-After`), those from `t + PAUSE_REACH_MS` to `t + pause_ms - 50`.
pub fn pause_breaches(lines: &[Line], pause_ms: i64) -> usize {
    let mut limited: Vec<i64> = lines
        .iter()
        .filter(|l| l.rate_limited)
        .map(|l| l.at_ms)
        .collect();
    limited.sort_unstable();
    lines
        .iter()
        .filter(|l| l.op == "send" || l.op == "lookup")
        .filter(|l| {
            // The latest 429 at or before this request.
            let i = limited.partition_point(|&t| t <= l.at_ms);
            i > 0 && {
                let t = limited[i - 1];
                l.at_ms >= t + PAUSE_REACH_MS && l.at_ms < t + pause_ms - 50
            }
        })
        .count()
}

/// What the log shows of `spec`'s flow control. `pause_ms`: how long the
/// fake's 429s pause (its whole-second `Retry-After`, 1 s at any limit of
/// at least one send a second).
pub async fn done(
    spec: &FlowSpec,
    store: &PgStore,
    log: &Path,
    pause_ms: i64,
) -> Result<FlowDone, RigError> {
    let lines = read_lines(log)?;
    let stores = stores_by_key(store).await?;
    let pacing = match spec.store_rate {
        Some(rate) => spec
            .rated()
            .iter()
            .map(|s| pacing(&lines, &stores, s, rate))
            .collect(),
        None => Vec::new(),
    };
    Ok(FlowDone {
        pacing,
        rate_limited: lines.iter().filter(|l| l.rate_limited).count(),
        pause_breaches: pause_breaches(&lines, pause_ms),
        judged: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(at_ms: i64, key: &str) -> Line {
        Line {
            at_ms,
            op: "send".into(),
            key: Some(key.into()),
            result: Some("created".into()),
            rate_limited: false,
        }
    }

    fn paced(per_s: u64, n: usize) -> (Vec<Line>, HashMap<String, String>) {
        let step = 1_000 / per_s as i64;
        let lines = (0..n)
            .map(|i| created(i as i64 * step, &format!("k{i}")))
            .collect();
        let stores = (0..n).map(|i| (format!("k{i}"), "s".to_string())).collect();
        (lines, stores)
    }

    #[test]
    fn a_store_paced_at_its_rate_is_within_its_bound() {
        let (lines, stores) = paced(5, 100);
        let p = pacing(
            &lines,
            &stores,
            "s",
            Rate {
                per_s: 5.0,
                burst: 5,
            },
        );
        assert_eq!((p.created, p.max_1s, p.max_10s), (100, 5, 50));
        assert!(p.within(), "{p:?}");
    }

    #[test]
    fn a_store_sent_faster_than_its_rate_is_caught() {
        // The negative control: paced at 7/s, judged against 5/s.
        let (lines, stores) = paced(7, 100);
        let p = pacing(
            &lines,
            &stores,
            "s",
            Rate {
                per_s: 5.0,
                burst: 5,
            },
        );
        assert!(!p.within(), "{p:?}");
    }

    #[test]
    fn requests_inside_a_shared_pause_are_breaches() {
        let mut lines = vec![Line {
            at_ms: 1_000,
            op: "send".into(),
            key: Some("a".into()),
            result: Some("rejected".into()),
            rate_limited: true,
        }];
        // Before the pause reached everyone, inside it, and after it.
        for at in [1_100, 1_600, 1_900, 2_100] {
            lines.push(created(at, "b"));
        }
        assert_eq!(pause_breaches(&lines, 1_000), 2);
    }

    #[test]
    fn pauses_pass_with_a_straggler_not_with_workers_that_share_none() {
        let done = |rate_limited, pause_breaches| FlowDone {
            rate_limited,
            pause_breaches,
            ..FlowDone::default()
        };
        assert!(done(110, 1).passed());
        assert!(done(110, 0).passed());
        assert!(!done(131, 84).passed());
        assert!(!done(10, 1).passed());
    }
}
