//! The flow scenarios' figures from the provider's log, and their pure
//! verdicts: messages created per window, sends answered "too many
//! requests", and a count or a rate judged against a target with a
//! tolerance.
//!
//! # Invariants
//! - Only the provider's `send` lines are read: a message counts when the
//!   provider logged it `created`, at the time the provider logged it.
//! - A band is whole counts, both ends included: 5/s over 10 s within 10%
//!   is 45..=55.

use serde::{Deserialize, Serialize};

/// A pacing or throughput target is met within this share of the rate.
pub const PACING_TOLERANCE: f64 = 0.10;

/// One `send` line of the provider's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendLine {
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    pub key: Option<String>,
    /// The provider created a message.
    pub created: bool,
    /// The provider answered 429 (`fault: rate_limited`).
    pub rate_limited: bool,
}

/// A log line as this module reads it; other fields are ignored.
#[derive(Deserialize)]
struct Line {
    at: String,
    op: String,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    fault: Option<String>,
}

/// The `send` lines of a log's text (JSON lines). A line that is not JSON,
/// or whose `at` is not RFC 3339, is skipped, as a torn last line is.
pub fn send_lines(text: &str) -> Vec<SendLine> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        .filter(|l| l.op == "send")
        .filter_map(|l| {
            let at = chrono::DateTime::parse_from_rfc3339(&l.at).ok()?;
            Some(SendLine {
                at_ms: at.timestamp_millis(),
                created: l.result.as_deref() == Some("created"),
                rate_limited: l.fault.as_deref() == Some("rate_limited"),
                key: l.key,
            })
        })
        .collect()
}

/// The times of the created messages whose key `keep` admits, sorted.
pub fn created_ms(lines: &[SendLine], keep: impl Fn(&str) -> bool) -> Vec<i64> {
    let mut out: Vec<i64> = lines
        .iter()
        .filter(|l| l.created && l.key.as_deref().is_some_and(&keep))
        .map(|l| l.at_ms)
        .collect();
    out.sort_unstable();
    out
}

/// How many of `times` fall in each of `n` consecutive windows of
/// `window_ms`, the first starting at `origin_ms`.
pub fn per_window(times: &[i64], origin_ms: i64, window_ms: i64, n: usize) -> Vec<u64> {
    let mut counts = vec![0u64; n];
    for t in times {
        let offset = t - origin_ms;
        if offset < 0 || window_ms <= 0 {
            continue;
        }
        if let Some(c) = usize::try_from(offset / window_ms)
            .ok()
            .and_then(|i| counts.get_mut(i))
        {
            *c += 1;
        }
    }
    counts
}

/// The whole counts a window may hold: `rate * window` within `tolerance`,
/// both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    pub expected: f64,
    pub low: u64,
    pub high: u64,
}

impl Band {
    pub fn new(rate_per_s: f64, window_s: f64, tolerance: f64) -> Band {
        let expected = rate_per_s * window_s;
        // The epsilon keeps 45.000000001 from rounding a whole bound away.
        let low = (expected * (1.0 - tolerance) - 1e-9).ceil().max(0.0);
        let high = (expected * (1.0 + tolerance) + 1e-9).floor().max(0.0);
        Band {
            expected,
            low: low as u64,
            high: high as u64,
        }
    }

    pub fn holds(&self, count: u64) -> bool {
        (self.low..=self.high).contains(&count)
    }
}

/// The pacing verdict: every window after the first within the band.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pacing {
    pub band: Band,
    /// The windows judged (all but the first of each round).
    pub judged: usize,
    /// Of those, the windows outside the band.
    pub outside: usize,
    pub met: bool,
}

/// Judges each round's windows (`rounds`), the first of each left out: it
/// holds the store's burst as well as its rate.
pub fn judge_pacing(rounds: &[Vec<u64>], band: Band) -> Pacing {
    let judged: Vec<u64> = rounds
        .iter()
        .flat_map(|w| w.iter().skip(1).copied())
        .collect();
    let outside = judged.iter().filter(|c| !band.holds(**c)).count();
    Pacing {
        band,
        judged: judged.len(),
        outside,
        met: !judged.is_empty() && outside == 0,
    }
}

/// Created messages a second over `[from_s, to_s)` after `origin_ms`.
pub fn rate_over(times: &[i64], origin_ms: i64, from_s: u64, to_s: u64) -> f64 {
    let (from, to) = (from_s as i64 * 1000, to_s as i64 * 1000);
    let n = times
        .iter()
        .filter(|t| (from..to).contains(&(*t - origin_ms)))
        .count();
    n as f64 / (to_s.saturating_sub(from_s)).max(1) as f64
}

/// Whether `rate_per_s` is within `tolerance` of `target_per_s`.
pub fn rate_holds(rate_per_s: f64, target_per_s: f64, tolerance: f64) -> bool {
    (rate_per_s - target_per_s).abs() <= target_per_s * tolerance + 1e-9
}

/// PASS or MISS, as the tables print a verdict.
pub fn pass(met: bool) -> &'static str {
    if met {
        "PASS"
    } else {
        "MISS"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log line of a send at `at_ms`, as the fake writes it.
    fn line(seq: u64, at_ms: i64, key: &str, result: &str, rate_limited: bool) -> String {
        let at = chrono::DateTime::from_timestamp_millis(at_ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let fault = if rate_limited {
            r#","fault":"rate_limited""#
        } else {
            ""
        };
        format!(
            r#"{{"seq":{seq},"at":"{at}","op":"send","key":"{key}","result":"{result}"{fault}}}"#
        )
    }

    /// A store's log: `burst` messages at once, then `rate_per_s` a second
    /// for `seconds`, from `t0_ms`; every fifth of its sends was first
    /// refused, and another store's messages are interleaved.
    fn paced_log(t0_ms: i64, burst: u32, rate_per_s: f64, seconds: u32) -> String {
        let mut out = Vec::new();
        let mut seq = 0;
        let mut push = |at: i64, key: String, result: &str, limited: bool| {
            seq += 1;
            out.push(line(seq, at, &key, result, limited));
        };
        for i in 0..burst {
            push(
                t0_ms + i64::from(i),
                format!("limited-{i}"),
                "created",
                false,
            );
        }
        let n = (rate_per_s * f64::from(seconds)) as u32;
        for i in 0..n {
            let at = t0_ms + (f64::from(i + 1) * 1000.0 / rate_per_s) as i64 - 1;
            if i % 5 == 0 {
                push(at - 1, format!("limited-b{i}"), "rejected", true);
            }
            push(at, format!("limited-b{i}"), "created", false);
            push(at, format!("other-{i}"), "created", false);
        }
        out.push("{\"seq\":".into());
        out.join("\n")
    }

    fn windows_of(log: &str) -> Vec<u64> {
        let lines = send_lines(log);
        let times = created_ms(&lines, |k| k.starts_with("limited-"));
        per_window(&times, times[0], 10_000, 6)
    }

    #[test]
    fn a_store_paced_at_its_rate_after_its_burst_meets_the_band() {
        let band = Band::new(5.0, 10.0, PACING_TOLERANCE);
        assert_eq!((band.low, band.high), (45, 55));
        let windows = windows_of(&paced_log(1_700_000_000_000, 5, 5.0, 60));
        // The first window holds the burst too: it is not judged.
        assert_eq!(windows, vec![55, 50, 50, 50, 50, 50]);
        let v = judge_pacing(&[windows], band);
        assert_eq!((v.judged, v.outside, v.met), (5, 0, true));
    }

    #[test]
    fn a_store_paced_at_seven_a_second_misses_the_five_a_second_band() {
        let band = Band::new(5.0, 10.0, PACING_TOLERANCE);
        let windows = windows_of(&paced_log(1_700_000_000_000, 5, 7.0, 60));
        assert!(windows[1..].iter().all(|w| *w == 70), "{windows:?}");
        let v = judge_pacing(&[windows], band);
        assert_eq!((v.judged, v.outside, v.met), (5, 5, false));
        // One window out of the band in one round is enough to miss.
        let v = judge_pacing(&[vec![55, 50, 50], vec![55, 50, 56]], band);
        assert_eq!((v.judged, v.outside, v.met), (4, 1, false));
        // No window after the first: nothing was judged, nothing met.
        assert!(!judge_pacing(&[vec![55]], band).met);
    }

    #[test]
    fn refused_sends_and_torn_lines_are_not_created_messages() {
        let log = paced_log(0, 0, 5.0, 10);
        let lines = send_lines(&log);
        assert_eq!(lines.iter().filter(|l| l.rate_limited).count(), 10);
        assert!(lines.iter().all(|l| !(l.rate_limited && l.created)));
        assert_eq!(created_ms(&lines, |k| k.starts_with("limited-")).len(), 50);
        assert_eq!(created_ms(&lines, |_| true).len(), 100);
        // Lines of other ops and unreadable lines are skipped.
        let other = r#"{"seq":1,"at":"2026-01-01T00:00:00.000Z","op":"lookup","key":"k","result":"not_found"}"#;
        assert!(send_lines(&format!("{other}\nnot json\n")).is_empty());
    }

    #[test]
    fn the_rate_over_a_span_is_judged_within_ten_percent() {
        // 50 a second for 30 s, every 20 ms, from 0.
        let times: Vec<i64> = (0..1_500).map(|i| i * 20).collect();
        let rate = rate_over(&times, 0, 5, 30);
        assert!((rate - 50.0).abs() < 1e-9, "{rate}");
        assert!(rate_holds(rate, 50.0, PACING_TOLERANCE));
        assert!(rate_holds(45.0, 50.0, PACING_TOLERANCE));
        assert!(rate_holds(55.0, 50.0, PACING_TOLERANCE));
        assert!(!rate_holds(44.9, 50.0, PACING_TOLERANCE));
        assert!(!rate_holds(70.0, 50.0, PACING_TOLERANCE));
        assert_eq!(per_window(&times, 0, 1_000, 3), vec![50, 50, 50]);
        // Times before the origin or past the last window are not counted.
        assert_eq!(per_window(&[-5, 0, 999, 3_000], 0, 1_000, 3), vec![2, 0, 0]);
        assert_eq!((pass(true), pass(false)), ("PASS", "MISS"));
    }
}
