//! Recovery: the provider's memory rebuilt from its own log after a restart.
//!
//! [`State::recover`] reads the log line by line into a [`Recovery`] (keys,
//! messages and their events as the log tells them), then turns it into the
//! live [`State`]: keys still within their retention, timers for the status
//! changes still to come, and webhook queues of the events not yet answered.
//!
//! In ignore-key mode a key may have any number of `created` lines; each is
//! a send of its own, remembered by its key (see `references`) until its
//! retention ends, and each message keeps its own plan and webhooks.
//!
//! # Invariants
//! - Nothing is recovered that the log does not hold; a line that contradicts
//!   an earlier one (a status moving backwards, a webhook for an event that
//!   never happened) refuses the log rather than guessing.
//! - A log written in the other mode is refused, never read as this one: in
//!   ignore-key mode every `created` line and every `faulted` line of a
//!   claimed send carries its send's `ordinal`, and in the default mode none
//!   does.
//! - Times are carried over as wall-clock offsets: a status change due 300 ms
//!   after its previous one is due 300 ms after it still, or at once if that
//!   moment has passed.

use super::references::RestoredSend;
use super::{
    event_parts, first_answer, message_id, message_number, Event, Fingerprint, KeyEntry, KeyKind,
    Message, RecoverySummary, State, Timer,
};
use crate::config::FakeConfig;
use crate::fate::MessagePlan;
use crate::logfile::{Extra, LineIn, LogFile};
use chrono::{DateTime, Utc};
use courier_core::Status;
use courier_provider::wire::{LogOp, SendResult};
use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl State {
    /// Rebuilds the state from the log (see [`Recovery`]).
    pub fn recover(
        cfg: &FakeConfig,
        now: Instant,
        now_wall: DateTime<Utc>,
    ) -> Result<(State, RecoverySummary, Vec<u64>), crate::FakeError> {
        let mut rec = Recovery {
            ignore_key: cfg.ignore_key,
            ..Recovery::default()
        };
        let opened = LogFile::open(&cfg.log_path, cfg.fsync, |line| rec.apply(line));
        if let Some(why) = rec.mismatch.take() {
            return Err(crate::FakeError::Config(format!(
                "the log {}: {why}",
                cfg.log_path.display()
            )));
        }
        let (log, opened) = opened?;
        let (state, mut summary, starts) = rec.finish(log, cfg, now, now_wall);
        summary.lines = opened.lines;
        summary.torn_bytes = opened.torn_bytes;
        Ok((state, summary, starts))
    }
}

#[derive(Debug)]
struct RecEvent {
    status: Status,
    at: String,
    attempts: u32,
    done: bool,
}

#[derive(Debug)]
struct RecMessage {
    key: Arc<str>,
    plan: MessagePlan,
    callback: Option<Arc<str>>,
    status: Status,
    updated_at: String,
    last_change: DateTime<Utc>,
    events: Vec<RecEvent>,
}

#[derive(Debug)]
struct RecKey {
    message: Option<u64>,
    fp: Fingerprint,
    first: DateTime<Utc>,
}

/// One send of ignore-key mode: a `created` or `faulted` line.
#[derive(Debug)]
struct RecSend {
    ordinal: u64,
    message: Option<u64>,
    ended: DateTime<Utc>,
}

/// Replays the log into keys, messages, timers and webhook queues.
#[derive(Default)]
struct Recovery {
    /// The mode this provider runs in, which the log must have been written in.
    ignore_key: bool,
    /// The default mode's keys.
    keys: HashMap<Arc<str>, RecKey>,
    /// Ignore-key mode's sends, by key, in the order of their lines.
    sends: HashMap<Arc<str>, Vec<RecSend>>,
    messages: HashMap<u64, RecMessage>,
    last_message: u64,
    /// Why the log cannot be read in this mode; reading stops at that line.
    mismatch: Option<String>,
}

fn wall(at: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(at)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("bad time {at:?}: {e}"))
}

/// Converts the wall-clock times of the log into this process's instants.
struct Clock {
    now: Instant,
    now_wall: DateTime<Utc>,
}

impl Clock {
    /// The instant of a wall-clock time (now, if it has passed).
    fn instant(&self, t: DateTime<Utc>) -> Instant {
        self.now + (t - self.now_wall).to_std().unwrap_or(Duration::ZERO)
    }
}

impl Recovery {
    fn apply(&mut self, line: LineIn) -> Result<(), String> {
        match line.op {
            LogOp::Send {
                key: Some(key),
                result: SendResult::Created,
                message_id: Some(id),
            } => {
                self.check_mode(line.seq, line.extra.ordinal.is_some())?;
                self.apply_created(key, id, line.at, line.extra)
            }
            LogOp::Send {
                key: Some(key),
                result: SendResult::Faulted,
                ..
            } => self.apply_faulted(key, line.seq, &line.at, &line.extra),
            LogOp::Status {
                message_id, status, ..
            } => self.apply_status(&message_id, status, line.at),
            LogOp::Webhook {
                event_id,
                attempt,
                answer,
                ..
            } => {
                let (n, status) = event_parts(&event_id)
                    .ok_or_else(|| format!("unknown event id {event_id:?}"))?;
                let event = self
                    .messages
                    .get_mut(&n)
                    .and_then(|m| m.events.iter_mut().find(|e| e.status == status))
                    .ok_or_else(|| format!("a webhook for {event_id}, which never happened"))?;
                event.attempts = event.attempts.max(attempt);
                event.done |= answer.is_success() || line.extra.gave_up;
                Ok(())
            }
            LogOp::Send { .. } | LogOp::Lookup { .. } => Ok(()),
        }
    }

    /// Refuses a line written in the other mode (`ordinal` present or not).
    fn check_mode(&mut self, seq: u64, ignore_key: bool) -> Result<(), String> {
        if ignore_key == self.ignore_key {
            return Ok(());
        }
        let (was, is) = if ignore_key {
            ("with", "without")
        } else {
            ("without", "with")
        };
        let why = format!(
            "line {seq} was written {was} --ignore-key and this provider runs {is} it; \
             restart it with the flags the log was written with, or on a new log"
        );
        self.mismatch = Some(why.clone());
        Err(why)
    }

    /// A `faulted` send line. In the default mode the key is remembered as
    /// faulted; in ignore-key mode it is one more send of the key, unless it
    /// was refused before it was claimed (`keys_max`, which has no ordinal).
    fn apply_faulted(
        &mut self,
        key: String,
        seq: u64,
        at: &str,
        extra: &Extra,
    ) -> Result<(), String> {
        let overload = extra.fault.as_deref() == Some("keys_max");
        if !(self.ignore_key && overload) {
            self.check_mode(seq, extra.ordinal.is_some())?;
        }
        let ended = wall(at)?;
        if let Some(ordinal) = extra.ordinal {
            let send = RecSend {
                ordinal,
                message: None,
                ended,
            };
            self.sends.entry(Arc::from(key)).or_default().push(send);
        } else if !self.ignore_key {
            self.keys.entry(Arc::from(key)).or_insert(RecKey {
                message: None,
                fp: [0; 16],
                first: ended,
            });
        }
        Ok(())
    }

    /// A `created` send line: the key, its message and the message's plan.
    fn apply_created(
        &mut self,
        key: String,
        id: String,
        at: String,
        extra: Extra,
    ) -> Result<(), String> {
        let n = message_number(&id).ok_or_else(|| format!("unknown message id {id:?}"))?;
        let fp_hex = extra.fp.ok_or("a created line without its fingerprint")?;
        let mut fp = [0u8; 16];
        hex::decode_to_slice(&fp_hex, &mut fp).map_err(|e| format!("bad fingerprint: {e}"))?;
        let plan = extra.plan.ok_or("a created line without its plan")?;
        let first = wall(&at)?;
        let key: Arc<str> = Arc::from(key);
        if let Some(ordinal) = extra.ordinal {
            let send = RecSend {
                ordinal,
                message: Some(n),
                ended: first,
            };
            self.sends.entry(key.clone()).or_default().push(send);
        } else {
            let rec_key = RecKey {
                message: Some(n),
                fp,
                first,
            };
            self.keys.insert(key.clone(), rec_key);
        }
        let message = RecMessage {
            key,
            plan,
            callback: extra.callback.map(Arc::from),
            status: Status::Accepted,
            updated_at: at,
            last_change: first,
            events: Vec::new(),
        };
        self.messages.insert(n, message);
        self.last_message = self.last_message.max(n);
        Ok(())
    }

    /// A `status` line: the message moves forward, and its event is owed.
    fn apply_status(&mut self, message_id: &str, status: Status, at: String) -> Result<(), String> {
        let n = message_number(message_id)
            .ok_or_else(|| format!("unknown message id {message_id:?}"))?;
        let m = self
            .messages
            .get_mut(&n)
            .ok_or_else(|| format!("a status line for {message_id}, never created"))?;
        if status.rank() <= m.status.rank() {
            return Err(format!("{message_id} moved from {} to {status}", m.status));
        }
        m.status = status;
        m.last_change = wall(&at)?;
        m.events.push(RecEvent {
            status,
            at: at.clone(),
            attempts: 0,
            done: false,
        });
        m.updated_at = at;
        Ok(())
    }

    fn finish(
        self,
        log: LogFile,
        cfg: &FakeConfig,
        now: Instant,
        now_wall: DateTime<Utc>,
    ) -> (State, RecoverySummary, Vec<u64>) {
        let clock = Clock { now, now_wall };
        let mut state = State::new(log, cfg);
        state.next_message = self.last_message + 1;
        let mut summary = RecoverySummary::default();
        restore_keys(&mut state, self.keys, cfg, &clock);
        restore_sends(&mut state, self.sends, cfg, &clock);
        let mut starts = Vec::new();
        for (n, m) in self.messages {
            if let Some(start) = restore_message(&mut state, &mut summary, n, m, cfg, &clock) {
                starts.push(start);
            }
        }
        summary.keys = state.keys.len() + state.refs.keys();
        summary.messages = state.messages.len();
        (state, summary, starts)
    }
}

/// The keys still within their retention, with their expiry queue in order.
fn restore_keys(
    state: &mut State,
    keys: HashMap<Arc<str>, RecKey>,
    cfg: &FakeConfig,
    clock: &Clock,
) {
    let mut order: Vec<(DateTime<Utc>, Arc<str>)> = Vec::new();
    for (key, k) in keys {
        let expires = k.first + chrono::Duration::milliseconds(cfg.key_retention_ms as i64);
        if expires <= clock.now_wall {
            continue;
        }
        let lag_end = k.first + chrono::Duration::milliseconds(cfg.lookup_lag_ms as i64);
        let kind = match k.message {
            Some(n) => {
                let id = message_id(n);
                KeyKind::Created {
                    message: n,
                    answer: first_answer(&id, &key),
                }
            }
            None => KeyKind::Faulted,
        };
        let entry = KeyEntry {
            kind,
            fp: k.fp,
            visible_at: clock.instant(lag_end),
            expires_at: clock.instant(expires),
        };
        state.keys.insert(key.clone(), entry);
        order.push((expires, key));
    }
    order.sort();
    state.expiry = order
        .into_iter()
        .map(|(t, k)| (clock.instant(t), k))
        .collect();
}

/// Ignore-key mode: the sends still within their retention, by key.
fn restore_sends(
    state: &mut State,
    sends: HashMap<Arc<str>, Vec<RecSend>>,
    cfg: &FakeConfig,
    clock: &Clock,
) {
    let retention = chrono::Duration::milliseconds(cfg.key_retention_ms as i64);
    let lag = chrono::Duration::milliseconds(cfg.lookup_lag_ms as i64);
    for (key, sends) in sends {
        let kept: Vec<RestoredSend> = sends
            .into_iter()
            .filter(|s| s.ended + retention > clock.now_wall)
            .map(|s| RestoredSend {
                ordinal: s.ordinal,
                message: s.message,
                visible_at: clock.instant(s.ended + lag),
                expires_at: clock.instant(s.ended + retention),
            })
            .collect();
        state.refs.restore(key, kept);
    }
    state.refs.sort_expiry();
}

/// One message: its next planned status change and its undelivered events.
/// Returns the message when its webhook delivery must be started.
fn restore_message(
    state: &mut State,
    summary: &mut RecoverySummary,
    n: u64,
    m: RecMessage,
    cfg: &FakeConfig,
    clock: &Clock,
) -> Option<u64> {
    let key_gone = if state.ignore_key {
        !state.refs.names(&m.key, n)
    } else {
        state
            .keys
            .get(&m.key)
            .is_none_or(|e| !matches!(e.kind, KeyKind::Created { message, .. } if message == n))
    };
    let mut message = Message {
        key: m.key,
        status: m.status,
        updated_at: m.updated_at,
        plan: m.plan,
        callback: m.callback,
        outbox: VecDeque::new(),
        held: None,
        delivering: false,
        key_gone,
    };
    // The rest of the plan.
    let next = match m.status {
        Status::Accepted => Some((m.plan.sent_ms, false)),
        Status::Sent => Some((m.plan.final_ms, true)),
        _ => None,
    };
    if let Some((delay_ms, to_final)) = next {
        let due = m.last_change + chrono::Duration::milliseconds(delay_ms as i64);
        state.timers.push(Reverse(Timer {
            due: clock.instant(due),
            message: n,
            to_final,
        }));
        summary.transitions += 1;
    }
    let start =
        message.callback.is_some() && requeue_events(&mut message, summary, m.events, m.plan, cfg);
    if message.key_gone {
        if message.settled() {
            return None;
        }
        state.lingering.push(n);
    }
    state.messages.insert(n, message);
    start.then_some(n)
}

/// Events not yet answered 2xx (nor given up on) are delivered again, in
/// the order the plan delivers them. True when there is one to deliver.
fn requeue_events(
    message: &mut Message,
    summary: &mut RecoverySummary,
    events: Vec<RecEvent>,
    plan: MessagePlan,
    cfg: &FakeConfig,
) -> bool {
    let mut pending: Vec<Event> = events
        .into_iter()
        .filter(|e| !e.done && e.attempts < cfg.webhook_attempts_max)
        .map(|e| Event {
            status: e.status,
            occurred_at: e.at,
            attempts_done: e.attempts,
        })
        .collect();
    if plan.out_of_order {
        if !message.status.is_final() {
            message.held = pending.pop();
        } else {
            pending.reverse();
        }
    }
    summary.webhooks += pending.len() + usize::from(message.held.is_some());
    message.outbox = pending.into();
    if message.outbox.is_empty() {
        return false;
    }
    message.delivering = true;
    true
}
