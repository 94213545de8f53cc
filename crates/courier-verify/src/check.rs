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
//!   previous `send` counts once, even when it was only replayed, unless
//!   every earlier `send` of the key was `rejected` (refused: nothing
//!   existed to look up).
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
//! - The fold is the same under every [`Promise`]: the promise decides only
//!   which of its counts [`Verifier::finish`] files as violations and which
//!   as counts it allows (`crate::promise`).

use crate::promise::Promise;
use crate::read::Expectation;
use crate::report::{Check, Duplicates, Report, Stats, UnknownHeld};
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

/// Verifies a log held in memory against [`Promise::ExactlyOnce`].
pub fn verify(entries: &[LogEntry], expected: Option<&[Expectation]>) -> Report {
    verify_under(entries, expected, Promise::ExactlyOnce)
}

/// Verifies a log held in memory against the given promise.
pub fn verify_under(
    entries: &[LogEntry],
    expected: Option<&[Expectation]>,
    promise: Promise,
) -> Report {
    let mut v = Verifier::with_promise(promise);
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
    /// The promise the log is judged against.
    promise: Promise,
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
    /// A verifier of [`Promise::ExactlyOnce`].
    pub fn new() -> Self {
        Verifier::with_promise(Promise::ExactlyOnce)
    }

    /// A verifier of the given promise.
    pub fn with_promise(promise: Promise) -> Self {
        Verifier {
            promise,
            next_seq: 1,
            ..Verifier::default()
        }
    }

    /// The promise this verifier judges.
    pub fn promise(&self) -> Promise {
        self.promise
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
        // A resend is blind only if an earlier send may have created
        // something: after sends that were all refused, nothing exists.
        let blind = st.sends > st.rejected_sends && !st.looked_up_since_send;
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
    /// given, and builds the report of the verifier's promise.
    pub fn finish(self, expected: Option<&[Expectation]>) -> Report {
        let p = self.promise;
        let (blind_resends, resends_without_lookup) = if p.allows_resend_without_lookup() {
            (Check::default(), Some(self.blind))
        } else {
            (self.blind, None)
        };
        let mut report = Report {
            promise: p,
            with_expectations: expected.is_some(),
            entries: self.entries,
            actions: 0,
            exactly_one: 0,
            more_than_one: Check::default(),
            no_effect: Check::default(),
            blind_resends,
            resends_without_lookup,
            duplicates_allowed: p.allows_duplicates().then(Duplicates::default),
            unknown_held: expected.is_some().then(UnknownHeld::default),
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
/// effects are counted from the log alone. No action is known to be held
/// as unknown, so under every promise an action with no effect is one.
fn judge_alone(keys: &[(String, KeyState)], report: &mut Report) {
    for (key, st) in keys.iter().filter(|(_, st)| st.sends > 0) {
        judge_more_than_one(report, key, st.created);
        judge_effects(report, key, st.created, false);
        if st.created == 0 && st.rejected_sends == st.sends {
            report.stats.keys_only_rejected += 1;
        }
    }
    if report.stats.keys_only_rejected > 0 {
        report.warnings.push(format!(
            "{} of the actions with no effect were only ever rejected by the provider; \
             give the courier's expectations to tell refusals from lost actions",
            report.stats.keys_only_rejected
        ));
    }
    if report.promise.allows_unknown_without_effect() && report.no_effect.count > 0 {
        report.warnings.push(format!(
            "{} allows no effect for actions the courier holds as unknown; \
             give the courier's expectations to tell them from lost actions",
            report.promise
        ));
    }
}

/// Counts an action with more than one effect: a violation, or a duplicate
/// the promise allows. Called for every action, whatever its ending.
fn judge_more_than_one(report: &mut Report, key: &str, created: u64) {
    if created < 2 {
        return;
    }
    match report.duplicates_allowed.as_mut() {
        Some(d) => {
            d.actions.add_key(key);
            d.extra_effects += created - 1;
        }
        None => report.more_than_one.add_key(key),
    }
}

/// Counts one action the promise judges by its number of effects; more
/// than one is [`judge_more_than_one`]'s. An action the courier holds as
/// unknown with no effect is not missing when the promise allows it.
fn judge_effects(report: &mut Report, key: &str, created: u64, unknown: bool) {
    report.actions += 1;
    match created {
        0 if unknown && report.promise.allows_unknown_without_effect() => {}
        0 => report.no_effect.add_key(key),
        1 => report.exactly_one += 1,
        _ => {}
    }
}

/// Counts an action the courier holds as unknown by its effects.
fn count_unknown_held(held: &mut UnknownHeld, key: &str, st: &KeyState) {
    held.actions.add_key(key);
    match st.created {
        0 => held.no_effect += 1,
        1 => held.one_effect += 1,
        _ => held.more_than_one += 1,
    }
    if st.provider_final.is_some() {
        held.provider_final += 1;
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
    let mut intent = IntentChecks::default();
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
        judge_more_than_one(report, &e.key, st.created);
        intent.judge_times(e, st, &mut report.stats);
        if intent.judge_ending(e, st, &mut report.stats) {
            judge_effects(report, &e.key, st.created, e.unknown);
            judge_outcome(e, st, report, &mut intent.outcomes);
        }
    }
    for (key, st) in keys {
        if st.created > 0 && !expected_keys.contains_key(key.as_str()) {
            for _ in 0..st.created {
                report.effects_for_unknown_keys.add_key(key);
            }
        }
    }
    if intent.untimed > 0 {
        report.warnings.push(format!(
            "{} send lines of actions with a not_before or an expires_at have no RFC 3339 `at`: \
             they were not checked against those times",
            intent.untimed
        ));
    }
    report.outcomes_differ = Some(intent.outcomes);
    report.refused_with_effect = Some(intent.refused);
    report.cancelled_with_effect = Some(intent.cancelled);
    report.sent_before_not_before = Some(intent.early);
    report.sent_after_expires_at = Some(intent.late);
}

/// Compares the courier's final status of a judged action with the
/// provider's last one. An action held as unknown has no outcome to compare
/// and is counted with its effects instead; one with several effects under
/// a promise that allows it is not compared either, since the provider's
/// last final line may be of any of its messages.
fn judge_outcome(e: &Expectation, st: &KeyState, report: &mut Report, outcomes: &mut Check) {
    if e.unknown {
        if let Some(held) = report.unknown_held.as_mut() {
            count_unknown_held(held, &e.key, st);
        }
        return;
    }
    if let Some(d) = report
        .duplicates_allowed
        .as_mut()
        .filter(|_| st.created > 1)
    {
        d.outcomes_not_compared += 1;
        return;
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

/// The rows of the courier's intent: outcomes, refused and cancelled
/// actions with an effect, and actions sent outside their time window.
#[derive(Default)]
struct IntentChecks {
    outcomes: Check,
    refused: Check,
    cancelled: Check,
    early: Check,
    late: Check,
    /// Untimed `send` lines of keys with a time to check.
    untimed: u64,
}

impl IntentChecks {
    /// Judges how an action ended: a cancelled or refused action, or an
    /// expired one with no effect, expects none. Returns whether the action
    /// is judged by its effects, as the promise says.
    fn judge_ending(&mut self, e: &Expectation, st: &KeyState, stats: &mut Stats) -> bool {
        if e.cancelled {
            stats.actions_cancelled += 1;
            if st.created > 0 {
                self.cancelled.add_key(&e.key);
            }
            return false;
        }
        if e.expired {
            stats.actions_expired += 1;
            if st.created == 0 {
                stats.actions_expired_unsent += 1;
                return false;
            }
        }
        if e.refused {
            stats.actions_refused += 1;
            if st.created > 0 {
                self.refused.add_key(&e.key);
            }
            return false;
        }
        true
    }

    /// Checks the times of one expected action's `send` lines.
    fn judge_times(&mut self, e: &Expectation, st: &KeyState, stats: &mut Stats) {
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
