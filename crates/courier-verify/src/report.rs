//! The verdict: counts per check, samples to investigate, and the table.
//!
//! # Invariants
//! - [`Report::violations`] is the sum of every violation row of the table;
//!   a row that needs the courier's database and did not get it adds nothing
//!   and says so instead of printing a zero.
//! - Each [`Check`] keeps at most [`SAMPLES_PER_CHECK_MAX`] samples, whatever
//!   its count.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The most samples kept per check: enough to start an investigation.
pub const SAMPLES_PER_CHECK_MAX: usize = 10;

/// What a row prints when its check needs the courier's expectations.
pub const NEEDS_DATABASE: &str = "needs the courier database (--database-url)";

/// One check: how many times it failed, and a few examples (usually keys).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub count: u64,
    pub samples: Vec<String>,
}

impl Check {
    /// Counts one failure and keeps its sample while there is room.
    pub fn add(&mut self, sample: String) {
        self.count += 1;
        if self.samples.len() < SAMPLES_PER_CHECK_MAX {
            self.samples.push(sample);
        }
    }

    /// Counts one failure for a key, keeping each key once among the samples.
    pub fn add_key(&mut self, key: &str) {
        self.count += 1;
        if self.samples.len() < SAMPLES_PER_CHECK_MAX && !self.samples.iter().any(|s| s == key) {
            self.samples.push(key.to_string());
        }
    }
}

/// Counts that describe the log; none of them is a violation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    pub send_lines: u64,
    pub sends_created: u64,
    pub sends_replayed: u64,
    pub sends_conflict: u64,
    pub sends_reused: u64,
    pub sends_rejected: u64,
    pub sends_faulted: u64,
    pub sends_without_key: u64,
    /// Sends whose latest lookup of the key had faulted: allowed by the log
    /// rule (there was a lookup), but worth a look.
    pub resends_after_faulted_lookup: u64,
    pub lookup_lines: u64,
    pub lookups_found: u64,
    pub lookups_not_found: u64,
    pub lookups_faulted: u64,
    pub status_lines: u64,
    pub final_status_lines: u64,
    /// `status` lines whose `final` flag does not match their status.
    pub status_lines_final_flag_wrong: u64,
    /// Keys with two different final statuses in the log (the last one counts).
    pub keys_with_disagreeing_finals: u64,
    pub webhook_lines: u64,
    /// Webhook deliveries with `attempt` above 1.
    pub webhook_retries: u64,
    /// Webhook deliveries the receiver did not answer with a 2xx.
    pub webhooks_not_accepted: u64,
    /// Without expectations: keys with no effect whose every send was rejected.
    pub keys_only_rejected: u64,
    /// With expectations: actions the courier marked refused.
    pub actions_refused: u64,
    /// `send` lines whose `at` is not RFC 3339 (their time is not checked).
    pub send_lines_without_time: u64,
    /// With expectations: actions with a `not_before`.
    pub actions_scheduled: u64,
    /// With expectations: actions with an `expires_at`.
    pub actions_expiring: u64,
    /// With expectations: actions the courier cancelled.
    pub actions_cancelled: u64,
    /// With expectations: actions the courier ended expired.
    pub actions_expired: u64,
    /// Of [`actions_expired`](Self::actions_expired), those with no effect,
    /// as expected: they are not counted in [`Report::actions`].
    pub actions_expired_unsent: u64,
}

/// The verifier's verdict on one log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Whether the courier's expectations were given.
    pub with_expectations: bool,
    /// Log entries read.
    pub entries: u64,
    /// Actions that should have exactly one effect: the expected actions not
    /// refused, not cancelled and not expired without an effect, or without
    /// expectations every key seen in a `send` line.
    pub actions: u64,
    /// Of [`actions`](Self::actions), those with exactly one `created` send.
    pub exactly_one: u64,
    /// Actions with two or more `created` sends.
    pub more_than_one: Check,
    /// Actions with no `created` send.
    pub no_effect: Check,
    /// `send` lines after an earlier `send` of the same key with no `lookup`
    /// of that key in between.
    pub blind_resends: Check,
    /// Actions whose courier final status differs from the provider's last
    /// final status; `None` without expectations.
    pub outcomes_differ: Option<Check>,
    /// Actions the courier marked refused that the provider created anyway;
    /// `None` without expectations.
    pub refused_with_effect: Option<Check>,
    /// Actions the courier cancelled that the provider created anyway;
    /// `None` without expectations.
    pub cancelled_with_effect: Option<Check>,
    /// Actions with a `send` line earlier than their `not_before`; `None`
    /// without expectations.
    pub sent_before_not_before: Option<Check>,
    /// Actions with a `send` line later than their `expires_at` plus
    /// [`expiry_clock_margin_ms`](Self::expiry_clock_margin_ms); `None`
    /// without expectations.
    pub sent_after_expires_at: Option<Check>,
    /// The clock margin of [`sent_after_expires_at`](Self::sent_after_expires_at)
    /// (`crate::EXPIRY_CLOCK_MARGIN_MS`).
    #[serde(default)]
    pub expiry_clock_margin_ms: u64,
    /// `created` sends for keys of no expected action (or with no key at all).
    pub effects_for_unknown_keys: Check,
    /// Entries whose `seq` is not the previous one plus one (gaps, repeats).
    pub seq_out_of_order: Check,
    pub stats: Stats,
    pub warnings: Vec<String>,
}

impl Report {
    /// The total of every violation row.
    pub fn violations(&self) -> u64 {
        self.more_than_one.count
            + self.no_effect.count
            + self.blind_resends.count
            + self.outcomes_differ.as_ref().map_or(0, |c| c.count)
            + self.refused_with_effect.as_ref().map_or(0, |c| c.count)
            + self.cancelled_with_effect.as_ref().map_or(0, |c| c.count)
            + self.sent_before_not_before.as_ref().map_or(0, |c| c.count)
            + self.sent_after_expires_at.as_ref().map_or(0, |c| c.count)
            + self.effects_for_unknown_keys.count
            + self.seq_out_of_order.count
    }

    pub fn passed(&self) -> bool {
        self.violations() == 0
    }

    /// The rows of the table, each with its check's samples.
    fn rows(&self) -> Vec<(String, String, Option<&Check>)> {
        let optional = |c: &Option<Check>| match c {
            Some(c) => c.count.to_string(),
            None => NEEDS_DATABASE.to_string(),
        };
        let late = format!(
            "actions sent more than {} ms after their expires_at",
            self.expiry_clock_margin_ms
        );
        let rows: Vec<(&str, String, Option<&Check>)> = vec![
            (
                "actions with exactly one provider effect",
                format!("{} of {}", self.exactly_one, self.actions),
                None,
            ),
            (
                "actions with more than one effect",
                self.more_than_one.count.to_string(),
                Some(&self.more_than_one),
            ),
            (
                "actions with no effect",
                self.no_effect.count.to_string(),
                Some(&self.no_effect),
            ),
            (
                "sends after an earlier send with no lookup in between",
                self.blind_resends.count.to_string(),
                Some(&self.blind_resends),
            ),
            (
                "outcomes that differ from the provider's final status",
                optional(&self.outcomes_differ),
                self.outcomes_differ.as_ref(),
            ),
            (
                "refused actions the provider created anyway",
                optional(&self.refused_with_effect),
                self.refused_with_effect.as_ref(),
            ),
            (
                "cancelled actions the provider created anyway",
                optional(&self.cancelled_with_effect),
                self.cancelled_with_effect.as_ref(),
            ),
            (
                "actions sent before their not_before",
                optional(&self.sent_before_not_before),
                self.sent_before_not_before.as_ref(),
            ),
            (
                &late,
                optional(&self.sent_after_expires_at),
                self.sent_after_expires_at.as_ref(),
            ),
            (
                "effects for unknown keys",
                self.effects_for_unknown_keys.count.to_string(),
                Some(&self.effects_for_unknown_keys),
            ),
            (
                "log lines out of sequence (seq gaps or repeats)",
                self.seq_out_of_order.count.to_string(),
                Some(&self.seq_out_of_order),
            ),
        ];
        rows.into_iter()
            .map(|(name, result, c)| (name.to_string(), result, c))
            .collect()
    }

    /// The markdown table of the checks.
    pub fn table(&self) -> String {
        let mut out = String::from("| check | result |\n|---|---|\n");
        for (name, result, _) in self.rows() {
            out.push_str(&format!("| {name} | {result} |\n"));
        }
        out
    }

    /// The report with `passed` and `violations` first, for `--json`.
    pub fn with_verdict(&self) -> WithVerdict<'_> {
        WithVerdict {
            passed: self.passed(),
            violations: self.violations(),
            report: self,
        }
    }

    /// [`with_verdict`](Self::with_verdict) as a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.with_verdict()).unwrap_or(serde_json::Value::Null)
    }
}

/// A [`Report`] serialized with its verdict in front.
#[derive(Debug, Serialize)]
pub struct WithVerdict<'a> {
    pub passed: bool,
    pub violations: u64,
    #[serde(flatten)]
    pub report: &'a Report,
}

/// The table, then the samples, the counts by kind of line and the warnings.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table())?;
        let samples: Vec<_> = self
            .rows()
            .into_iter()
            .filter_map(|(name, _, c)| c.filter(|c| c.count > 0).map(|c| (name, c)))
            .collect();
        if !samples.is_empty() {
            writeln!(f, "\nsamples (up to {SAMPLES_PER_CHECK_MAX} per check):")?;
            for (name, c) in samples {
                writeln!(f, "- {name}: {}", c.samples.join(", "))?;
            }
        }
        let s = &self.stats;
        writeln!(f, "\nlog: {} entries", self.entries)?;
        writeln!(
            f,
            "- send: {} (created {}, replayed {}, conflict {}, reused {}, rejected {}, faulted {}, without key {})",
            s.send_lines,
            s.sends_created,
            s.sends_replayed,
            s.sends_conflict,
            s.sends_reused,
            s.sends_rejected,
            s.sends_faulted,
            s.sends_without_key
        )?;
        writeln!(
            f,
            "- lookup: {} (found {}, not_found {}, faulted {}); resends after a faulted lookup: {}",
            s.lookup_lines,
            s.lookups_found,
            s.lookups_not_found,
            s.lookups_faulted,
            s.resends_after_faulted_lookup
        )?;
        writeln!(
            f,
            "- status: {} ({} final, {} with a wrong final flag); keys with two different finals: {}",
            s.status_lines,
            s.final_status_lines,
            s.status_lines_final_flag_wrong,
            s.keys_with_disagreeing_finals
        )?;
        writeln!(
            f,
            "- webhook: {} ({} retries, {} not answered 2xx)",
            s.webhook_lines, s.webhook_retries, s.webhooks_not_accepted
        )?;
        if self.with_expectations {
            writeln!(
                f,
                "- actions refused by the provider: {}",
                s.actions_refused
            )?;
            writeln!(
                f,
                "- actions with a not_before: {}; with an expires_at: {}; cancelled: {}; \
                 expired: {} ({} with no effect, as expected)",
                s.actions_scheduled,
                s.actions_expiring,
                s.actions_cancelled,
                s.actions_expired,
                s.actions_expired_unsent
            )?;
        }
        if s.send_lines_without_time > 0 {
            writeln!(
                f,
                "- send lines without an RFC 3339 time: {}",
                s.send_lines_without_time
            )?;
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        match self.violations() {
            0 => writeln!(f, "\nPASSED: no violation"),
            1 => writeln!(f, "\nFAILED: 1 violation"),
            n => writeln!(f, "\nFAILED: {n} violations"),
        }
    }
}
