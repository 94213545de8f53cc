//! The checks, as a pure fold over log entries.
//!
//! [`Verifier::observe`] takes entries in log order and keeps one small state
//! per key; [`Verifier::finish`] compares that state with the courier's
//! expectations (when there are any) and builds the [`Report`].
//!
//! # Invariants
//! - An effect is a `send` line with `result: created`, and nothing else:
//!   replays, lookups and status lines never count as effects.
//! - The blind-resend rule is about `send` lines whatever their result: a
//!   second `send` of a key with no `lookup` of that same key since the
//!   previous `send` counts once, even when it was only replayed.
//! - The provider's final status of a key is the status of its LAST `status`
//!   line with `final: true`, not the first one and not the highest ranked.
//! - Keys are reported in the order they first appear (log order, or the
//!   expectations' order), so the same input gives the same report.
//! - The time rules are about `send` lines whatever their result: an
//!   action's key has no `send` line earlier than its `not_before`, and none
//!   later than its `expires_at` plus [`EXPIRY_CLOCK_MARGIN_MS`]. A line's
//!   `at` stands for the whole unit of its last digit (`…:01.5Z` for
//!   1.500 to 1.599 s; milliseconds at the finest), and a line counts only
//!   when every instant it may stand for breaks the rule. Each action
//!   breaking a rule counts once.

use crate::read::Expectation;
use crate::report::{Check, Report, Stats};
use chrono::{DateTime, SecondsFormat, Utc};
use courier_core::Status;
use courier_provider::wire::{LogEntry, LogOp, LookupResult, SendResult};
use std::collections::HashMap;

/// How much later than an action's `expires_at` a `send` line may be logged
/// before it counts as a send after the deadline. The worker stops sending
/// its send margin before the deadline, but the provider logs a line when
/// it handles the request, on its own clock: the margin covers the request's
/// way to the provider and the difference between the provider's clock and
/// the database's. `not_before` has no margin: the provider logs a request
/// after it left, never before.
pub const EXPIRY_CLOCK_MARGIN_MS: u64 = 1_000;

/// Verifies a log held in memory.
pub fn verify(entries: &[LogEntry], expected: Option<&[Expectation]>) -> Report {
    let mut v = Verifier::new();
    for e in entries {
        v.observe(e);
    }
    v.finish(expected)
}

/// What the log says about one key.
#[derive(Debug, Default, Clone)]
struct KeyState {
    /// `send` lines for this key.
    sends: u64,
    /// `send` lines with `result: rejected`.
    rejected_sends: u64,
    /// `send` lines with `result: created`: the provider's effects.
    created: u64,
    /// A `lookup` of this key came after its latest `send`.
    looked_up_since_send: bool,
    /// The latest lookup of this key faulted.
    last_lookup_faulted: bool,
    /// The status of the latest `status` line with `final: true`.
    provider_final: Option<Status>,
    /// Two different final statuses were logged for this key.
    finals_disagree: bool,
    /// Of this key's `send` lines, the earliest of the latest instants
    /// each may stand for, and the latest `at`, in milliseconds since the
    /// Unix epoch.
    first_send_ms: Option<i64>,
    last_send_ms: Option<i64>,
    /// `send` lines of this key whose `at` is not RFC 3339.
    untimed_sends: u64,
}

/// A streaming verifier: feed it entries in log order, then [`finish`](Self::finish).
#[derive(Debug, Default)]
pub struct Verifier {
    /// Keys in the order they first appear, with their state.
    keys: Vec<(String, KeyState)>,
    index: HashMap<String, usize>,
    /// Entries observed so far.
    entries: u64,
    /// The `seq` the next entry must carry.
    next_seq: u64,
    seq: Check,
    blind: Check,
    keyless_created: u64,
    stats: Stats,
}

impl Verifier {
    pub fn new() -> Self {
        Verifier {
            next_seq: 1,
            ..Verifier::default()
        }
    }

    fn state(&mut self, key: &str) -> &mut KeyState {
        let i = match self.index.get(key) {
            Some(&i) => i,
            None => {
                self.keys.push((key.to_string(), KeyState::default()));
                self.index.insert(key.to_string(), self.keys.len() - 1);
                self.keys.len() - 1
            }
        };
        &mut self.keys[i].1
    }

    /// Takes the next entry of the log.
    pub fn observe(&mut self, e: &LogEntry) {
        self.entries += 1;
        self.check_seq(e.seq);
        match &e.op {
            LogOp::Send {
                key,
                result,
                message_id: _,
            } => self.observe_send(key.as_deref(), *result, &e.at),
            LogOp::Lookup { key, result, .. } => {
                self.stats.lookup_lines += 1;
                match result {
                    LookupResult::Found => self.stats.lookups_found += 1,
                    LookupResult::NotFound => self.stats.lookups_not_found += 1,
                    LookupResult::Faulted => self.stats.lookups_faulted += 1,
                }
                let st = self.state(key);
                st.looked_up_since_send = true;
                st.last_lookup_faulted = *result == LookupResult::Faulted;
            }
            LogOp::Status {
                key,
                status,
                is_final,
                ..
            } => {
                self.stats.status_lines += 1;
                if *is_final != status.is_final() {
                    self.stats.status_lines_final_flag_wrong += 1;
                }
                if *is_final {
                    self.stats.final_status_lines += 1;
                    let st = self.state(key);
                    if st.provider_final.is_some_and(|f| f != *status) {
                        st.finals_disagree = true;
                    }
                    st.provider_final = Some(*status);
                }
            }
            LogOp::Webhook {
                attempt, answer, ..
            } => {
                self.stats.webhook_lines += 1;
                if *attempt > 1 {
                    self.stats.webhook_retries += 1;
                }
                if !answer.is_success() {
                    self.stats.webhooks_not_accepted += 1;
                }
            }
        }
    }

    fn check_seq(&mut self, seq: u64) {
        let entry = self.entries;
        let expected = self.next_seq;
        if seq == expected {
            self.next_seq += 1;
        } else if seq > expected {
            self.seq.add(format!(
                "entry {entry}: seq {seq} where {expected} was due ({} missing)",
                seq - expected
            ));
            self.next_seq = seq.saturating_add(1);
        } else {
            // A repeat or a step back: the sequence resumes where it was.
            self.seq.add(format!(
                "entry {entry}: seq {seq} repeats or goes back (seq {expected} was due)"
            ));
        }
    }

    fn observe_send(&mut self, key: Option<&str>, result: SendResult, at: &str) {
        self.stats.send_lines += 1;
        let at_ms = DateTime::parse_from_rfc3339(at)
            .ok()
            .map(|t| (t.timestamp_millis(), unit_ms(at)));
        if at_ms.is_none() {
            self.stats.send_lines_without_time += 1;
        }
        match result {
            SendResult::Created => self.stats.sends_created += 1,
            SendResult::Replayed => self.stats.sends_replayed += 1,
            SendResult::Conflict => self.stats.sends_conflict += 1,
            SendResult::Reused => self.stats.sends_reused += 1,
            SendResult::Rejected => self.stats.sends_rejected += 1,
            SendResult::Faulted => self.stats.sends_faulted += 1,
        }
        let Some(key) = key else {
            self.stats.sends_without_key += 1;
            if result == SendResult::Created {
                self.keyless_created += 1;
            }
            return;
        };
        let st = self.state(key);
        let blind = st.sends > 0 && !st.looked_up_since_send;
        let after_faulted_lookup =
            st.sends > 0 && st.looked_up_since_send && st.last_lookup_faulted;
        st.sends += 1;
        st.looked_up_since_send = false;
        match at_ms {
            Some((ms, unit)) => {
                let latest = ms + unit - 1;
                st.first_send_ms = Some(st.first_send_ms.map_or(latest, |f| f.min(latest)));
                st.last_send_ms = Some(st.last_send_ms.map_or(ms, |l| l.max(ms)));
            }
            None => st.untimed_sends += 1,
        }
        if result == SendResult::Created {
            st.created += 1;
        }
        if result == SendResult::Rejected {
            st.rejected_sends += 1;
        }
        if blind {
            self.blind.add_key(key);
        }
        if after_faulted_lookup {
            self.stats.resends_after_faulted_lookup += 1;
        }
    }

    /// Compares what the log says with the courier's expectations, when
    /// given, and builds the report.
    pub fn finish(self, expected: Option<&[Expectation]>) -> Report {
        let mut report = Report {
            with_expectations: expected.is_some(),
            entries: self.entries,
            actions: 0,
            exactly_one: 0,
            more_than_one: Check::default(),
            no_effect: Check::default(),
            blind_resends: self.blind,
            outcomes_differ: None,
            refused_with_effect: None,
            cancelled_with_effect: None,
            sent_before_not_before: None,
            sent_after_expires_at: None,
            expiry_clock_margin_ms: EXPIRY_CLOCK_MARGIN_MS,
            effects_for_unknown_keys: Check::default(),
            seq_out_of_order: self.seq,
            stats: self.stats,
            warnings: Vec::new(),
        };
        report.stats.keys_with_disagreeing_finals = self
            .keys
            .iter()
            .filter(|(_, st)| st.finals_disagree)
            .count() as u64;
        for _ in 0..self.keyless_created {
            report
                .effects_for_unknown_keys
                .add_key("(a created send line without a key)");
        }
        if report.stats.send_lines == 0 {
            report
                .warnings
                .push("the log has no send lines: there is nothing to verify".to_string());
        }
        match expected {
            None => judge_alone(&self.keys, &mut report),
            Some(expected) => judge_against(&self.keys, &self.index, &mut report, expected),
        }
        report
    }
}

/// Without expectations: every key with a send is an action, and its
/// effects are counted from the log alone.
fn judge_alone(keys: &[(String, KeyState)], report: &mut Report) {
    for (key, st) in keys.iter().filter(|(_, st)| st.sends > 0) {
        report.actions += 1;
        match st.created {
            0 => {
                report.no_effect.add_key(key);
                if st.rejected_sends == st.sends {
                    report.stats.keys_only_rejected += 1;
                }
            }
            1 => report.exactly_one += 1,
            _ => report.more_than_one.add_key(key),
        }
    }
    if report.stats.keys_only_rejected > 0 {
        report.warnings.push(format!(
            "{} of the actions with no effect were only ever rejected by the provider; \
             give the courier's expectations to tell refusals from lost actions",
            report.stats.keys_only_rejected
        ));
    }
}

/// With expectations: each expected action against its key's effects and
/// final status; effects of keys nobody expected are counted apart.
fn judge_against(
    keys: &[(String, KeyState)],
    index: &HashMap<String, usize>,
    report: &mut Report,
    expected: &[Expectation],
) {
    let mut outcomes = Check::default();
    let mut refused = Check::default();
    let mut times = TimeChecks::default();
    let mut expected_keys: HashMap<&str, &str> = HashMap::new();
    let no_state = KeyState::default();
    for e in expected {
        if let Some(other) = expected_keys.insert(&e.key, &e.action_id) {
            report.warnings.push(format!(
                "key {:?} is expected for more than one action ({other} and {})",
                e.key, e.action_id
            ));
        }
        let st = index.get(&e.key).map_or(&no_state, |&i| &keys[i].1);
        if st.created > 1 {
            report.more_than_one.add_key(&e.key);
        }
        times.judge(e, st, &mut report.stats);
        if e.cancelled {
            report.stats.actions_cancelled += 1;
            if st.created > 0 {
                times.cancelled.add_key(&e.key);
            }
            continue;
        }
        if e.expired {
            report.stats.actions_expired += 1;
            if st.created == 0 {
                report.stats.actions_expired_unsent += 1;
                continue;
            }
        }
        if e.refused {
            report.stats.actions_refused += 1;
            if st.created > 0 {
                refused.add_key(&e.key);
            }
            continue;
        }
        report.actions += 1;
        match st.created {
            0 => report.no_effect.add_key(&e.key),
            1 => report.exactly_one += 1,
            _ => {}
        }
        if e.courier_final != st.provider_final {
            outcomes.add(format!(
                "{} (courier: {}, provider: {})",
                e.key,
                e.courier_final.map_or("none", Status::as_str),
                st.provider_final.map_or("none", Status::as_str),
            ));
        }
    }
    for (key, st) in keys {
        if st.created > 0 && !expected_keys.contains_key(key.as_str()) {
            for _ in 0..st.created {
                report.effects_for_unknown_keys.add_key(key);
            }
        }
    }
    if times.untimed > 0 {
        report.warnings.push(format!(
            "{} send lines of actions with a not_before or an expires_at have no RFC 3339 `at`: \
             they were not checked against those times",
            times.untimed
        ));
    }
    report.outcomes_differ = Some(outcomes);
    report.refused_with_effect = Some(refused);
    report.cancelled_with_effect = Some(times.cancelled);
    report.sent_before_not_before = Some(times.early);
    report.sent_after_expires_at = Some(times.late);
}

/// The rows of the courier's intent: cancelled actions with an effect, and
/// actions sent outside their time window.
#[derive(Default)]
struct TimeChecks {
    cancelled: Check,
    early: Check,
    late: Check,
    /// Untimed `send` lines of keys with a time to check.
    untimed: u64,
}

impl TimeChecks {
    /// Checks the times of one expected action's `send` lines.
    fn judge(&mut self, e: &Expectation, st: &KeyState, stats: &mut Stats) {
        if let Some(nb) = e.not_before {
            stats.actions_scheduled += 1;
            let nb_ms = nb.timestamp_millis();
            if let Some(first) = st.first_send_ms.filter(|&f| f < nb_ms) {
                self.early.add(format!(
                    "{} (first send by {}, not_before {})",
                    e.key,
                    ms_text(first),
                    ms_text(nb_ms)
                ));
            }
        }
        if let Some(ea) = e.expires_at {
            stats.actions_expiring += 1;
            let ea_ms = ea.timestamp_millis();
            let margin_ms = EXPIRY_CLOCK_MARGIN_MS as i64;
            if let Some(last) = st.last_send_ms.filter(|&l| l > ea_ms + margin_ms) {
                self.late.add(format!(
                    "{} (last send {}, expires_at {})",
                    e.key,
                    ms_text(last),
                    ms_text(ea_ms)
                ));
            }
        }
        if e.not_before.is_some() || e.expires_at.is_some() {
            self.untimed += st.untimed_sends;
        }
    }
}

/// The unit of an RFC 3339 time's last digit, in milliseconds: 1000 for
/// whole seconds, 100 for tenths, 10 for hundredths, 1 for milliseconds or
/// finer.
fn unit_ms(at: &str) -> i64 {
    let digits = at
        .split_once('.')
        .map_or(0, |(_, f)| f.bytes().take_while(u8::is_ascii_digit).count());
    10_i64.pow(3 - digits.min(3) as u32)
}

/// Milliseconds since the Unix epoch as RFC 3339, for samples.
fn ms_text(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}
