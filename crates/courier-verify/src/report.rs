//! The verdict: counts per check, samples to investigate, and the table.
//!
//! # Invariants
//! - [`Report::violations`] is the sum of every violation row of the table;
//!   a row that needs the courier's database and did not get it adds nothing
//!   and says so instead of printing a zero.
//! - The report names the [`Promise`] it judged. What the promise allows is
//!   counted in rows of its own, named as allowed, and never in a violation
//!   row: under `at-least-once` the duplicates are in
//!   [`Report::duplicates_allowed`] and [`Report::more_than_one`] is empty;
//!   where resends with no lookup are by design they are in
//!   [`Report::resends_without_lookup`] and [`Report::blind_resends`] is empty.
//! - Each [`Check`] keeps at most [`SAMPLES_PER_CHECK_MAX`] samples, whatever
//!   its count.

use crate::Promise;
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

/// The actions the courier holds as unknown, by their number of effects.
/// None of these counts is a violation: an action held as unknown with no
/// effect is one in [`Report::no_effect`] under the promises that do not
/// allow it, and one with more than one effect is in
/// [`Report::more_than_one`] (or [`Report::duplicates_allowed`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnknownHeld {
    /// The actions held as unknown, with their keys as samples.
    pub actions: Check,
    pub no_effect: u64,
    pub one_effect: u64,
    pub more_than_one: u64,
    /// Of [`actions`](Self::actions), those the provider logged a final
    /// status for: not compared with the courier's, which has no outcome.
    pub provider_final: u64,
}

/// Duplicates a promise allows (`at-least-once`): counted, never violations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Duplicates {
    /// Actions with two or more `created` sends, with their keys as samples.
    pub actions: Check,
    /// `created` sends beyond the first, over those actions.
    pub extra_effects: u64,
    /// Of [`actions`](Self::actions), those whose outcome was not compared
    /// with the provider's last final status: with several messages for
    /// one key, that status may be of any of them.
    pub outcomes_not_compared: u64,
}

/// The verifier's verdict on one log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The promise the log was judged against: it decides which counts are
    /// violations (see [`crate::promise`]).
    #[serde(default)]
    pub promise: Promise,
    /// Whether the courier's expectations were given.
    pub with_expectations: bool,
    /// Log entries read.
    pub entries: u64,
    /// Actions judged against the promise: the expected actions not
    /// refused, not cancelled and not expired without an effect, or without
    /// expectations every key seen in a `send` line.
    pub actions: u64,
    /// Of [`actions`](Self::actions), those with exactly one `created` send.
    pub exactly_one: u64,
    /// Actions with two or more `created` sends, when the promise does not
    /// allow it (under `at-least-once` they are in
    /// [`duplicates_allowed`](Self::duplicates_allowed) and this is empty).
    pub more_than_one: Check,
    /// Actions with no `created` send, but for those the courier holds as
    /// unknown when the promise allows it.
    pub no_effect: Check,
    /// `send` lines after an earlier `send` of the same key with no `lookup`
    /// of that key in between, when the promise does not allow them (when
    /// it does they are in [`resends_without_lookup`](Self::resends_without_lookup)
    /// and this is empty).
    pub blind_resends: Check,
    /// The same `send` lines as [`blind_resends`](Self::blind_resends) when
    /// the promise makes them by design: counted, not violations; `None`
    /// under the other promises.
    #[serde(default)]
    pub resends_without_lookup: Option<Check>,
    /// Under `at-least-once`, the actions with more than one effect and
    /// their extra effects; `None` under the other promises.
    #[serde(default)]
    pub duplicates_allowed: Option<Duplicates>,
    /// The actions the courier holds as unknown, by effects; `None` without
    /// expectations.
    #[serde(default)]
    pub unknown_held: Option<UnknownHeld>,
    /// Actions whose courier final status differs from the provider's last
    /// final status (actions held as unknown, and duplicated actions under
    /// `at-least-once`, are not compared); `None` without expectations.
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

/// One row of the table: its name, its result and the check whose samples
/// it lists, if any.
type Row<'a> = (String, String, Option<&'a Check>);

impl Report {
    /// The total of every violation row. Counts the promise allows are in
    /// rows of their own and add nothing.
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
    fn rows(&self) -> Vec<Row<'_>> {
        let mut rows = self.effect_rows();
        rows.extend(self.intent_rows());
        rows.push(row(
            "effects for unknown keys",
            self.effects_for_unknown_keys.count.to_string(),
            Some(&self.effects_for_unknown_keys),
        ));
        rows.push(row(
            "log lines out of sequence (seq gaps or repeats)",
            self.seq_out_of_order.count.to_string(),
            Some(&self.seq_out_of_order),
        ));
        rows
    }

    /// The rows of effects per action and of resends, as the promise
    /// judges them.
    fn effect_rows(&self) -> Vec<Row<'_>> {
        let p = self.promise;
        let mut rows = vec![row(
            "actions with exactly one provider effect",
            format!("{} of {}", self.exactly_one, self.actions),
            None,
        )];
        rows.push(match &self.duplicates_allowed {
            Some(d) => row(
                &format!("actions with more than one effect (allowed by {p})"),
                if self.with_expectations {
                    format!(
                        "{} (extra effects: {}; outcomes not compared: {})",
                        d.actions.count, d.extra_effects, d.outcomes_not_compared
                    )
                } else {
                    format!("{} (extra effects: {})", d.actions.count, d.extra_effects)
                },
                Some(&d.actions),
            ),
            None => check_row("actions with more than one effect", &self.more_than_one),
        });
        let no_effect = if p.allows_unknown_without_effect() && self.with_expectations {
            "actions with no effect, not held as unknown"
        } else {
            "actions with no effect"
        };
        rows.push(check_row(no_effect, &self.no_effect));
        if let Some(r) = self.unknown_held_row() {
            rows.push(r);
        }
        let resends = "sends after an earlier send with no lookup in between";
        rows.push(match &self.resends_without_lookup {
            Some(c) => check_row(&format!("{resends} (by design under {p})"), c),
            None => check_row(resends, &self.blind_resends),
        });
        rows
    }

    /// The row of actions held as unknown: under the promises that allow
    /// them no effect, always; under the others, when there are any.
    fn unknown_held_row(&self) -> Option<Row<'_>> {
        let name = "actions the courier holds as unknown";
        match &self.unknown_held {
            Some(u) if u.actions.count > 0 || self.promise.allows_unknown_without_effect() => {
                Some(row(
                    name,
                    format!(
                        "{} ({} with no effect, {} with one, {} with more; \
                         {} with a provider final, not compared)",
                        u.actions.count,
                        u.no_effect,
                        u.one_effect,
                        u.more_than_one,
                        u.provider_final
                    ),
                    Some(&u.actions),
                ))
            }
            None if self.promise.allows_unknown_without_effect() => {
                Some(row(name, NEEDS_DATABASE.to_string(), None))
            }
            _ => None,
        }
    }

    /// The rows of the courier's intent, each needing its expectations.
    fn intent_rows(&self) -> Vec<Row<'_>> {
        let late = format!(
            "actions sent more than {} ms after their expires_at",
            self.expiry_clock_margin_ms
        );
        vec![
            optional_row(
                "outcomes that differ from the provider's final status",
                &self.outcomes_differ,
            ),
            optional_row(
                "refused actions the provider created anyway",
                &self.refused_with_effect,
            ),
            optional_row(
                "cancelled actions the provider created anyway",
                &self.cancelled_with_effect,
            ),
            optional_row(
                "actions sent before their not_before",
                &self.sent_before_not_before,
            ),
            optional_row(&late, &self.sent_after_expires_at),
        ]
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

fn row<'a>(name: &str, result: String, check: Option<&'a Check>) -> Row<'a> {
    (name.to_string(), result, check)
}

fn check_row<'a>(name: &str, check: &'a Check) -> Row<'a> {
    row(name, check.count.to_string(), Some(check))
}

/// A row whose check needs the courier's expectations.
fn optional_row<'a>(name: &str, check: &'a Option<Check>) -> Row<'a> {
    match check {
        Some(c) => check_row(name, c),
        None => row(name, NEEDS_DATABASE.to_string(), None),
    }
}

/// The promise, the table, then the samples, the counts by kind of line and the warnings.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "promise: {} ({})\n",
            self.promise,
            self.promise.summary()
        )?;
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
        writeln!(f, "\nlog: {} entries", self.entries)?;
        write_log_counts(f, &self.stats, self.with_expectations)?;
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

/// The counts by kind of line, and of the courier's intent when its
/// expectations were given.
fn write_log_counts(f: &mut fmt::Formatter<'_>, s: &Stats, with_expectations: bool) -> fmt::Result {
    writeln!(
        f,
        "- send: {} (created {}, replayed {}, conflict {}, reused {}, rejected {}, faulted {}, \
         without key {})",
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
    if with_expectations {
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
    Ok(())
}
