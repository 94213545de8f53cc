//! The provider's live memory (keys, messages, timers, webhook queues) and
//! the decisions that change it. Its rebuilding from the log after a
//! restart is [`recovery`]; ignore-key mode, where a key is only the
//! client's reference to any number of messages, is [`references`]; status
//! changes as they come due and the webhook queues they fill are
//! [`schedule`].
//!
//! Every method that changes something writes its log line in the same
//! critical section, before the change becomes visible to anyone else. The
//! HTTP layer, the scheduler and the webhook deliverer only call these
//! methods under the one state lock.
//!
//! # Invariants
//! - A key is claimed (`InProgress`) before its message is created and is
//!   `Created` only after the `created` line is on disk, so a concurrent
//!   repeat sees `409` and never a second message, and no `replayed` line
//!   can precede its `created` line.
//! - While a key is remembered it names at most one message (in the default
//!   mode; in ignore-key mode `references` keeps its own invariants).
//! - A message's status only moves forward: `accepted -> sent -> final`, one
//!   final status, each step one `status` line at the moment it happens.

mod recovery;
mod references;
mod schedule;

use crate::config::FakeConfig;
use crate::fate::{MessagePlan, TimeoutFault};
use crate::logfile::{Extra, LogFile, LogWriteError};
use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use courier_core::Status;
use courier_provider::wire::{
    ErrorBody, LogOp, LookupResult, MessageView, SendRequest, SendResult,
};
use references::References;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How late a status change may fire to share a scheduler wake-up.
const TIMER_SLACK: Duration = Duration::from_millis(2);

/// The error of a lookup while lookups are off, in its answer and its log
/// line's `fault`.
pub(crate) const LOOKUP_NOT_SUPPORTED: &str = "lookup_not_supported";

/// The fingerprint of a send's content; equal content, equal fingerprint.
pub(crate) type Fingerprint = [u8; 16];

/// Fingerprints the parsed request (not its bytes), so the same message sent
/// with other JSON spacing or field order is still a repeat.
pub(crate) fn fingerprint(req: &SendRequest) -> Fingerprint {
    let mut h = Sha256::new();
    for part in [Some(&req.to), Some(&req.body), req.status_callback.as_ref()] {
        match part {
            Some(s) => {
                h.update([1u8]);
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            None => h.update([0u8]),
        }
    }
    let digest = h.finalize();
    let mut fp = [0u8; 16];
    fp.copy_from_slice(&digest[..16]);
    fp
}

/// The wall-clock time of a log line: RFC 3339 with milliseconds, UTC.
pub(crate) fn now_at() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `msg_000001`, from the message's number.
pub(crate) fn message_id(n: u64) -> String {
    format!("msg_{n:06}")
}

fn message_number(id: &str) -> Option<u64> {
    id.strip_prefix("msg_")?.parse().ok()
}

/// Stable event ids, so a redelivery carries the same id.
pub(crate) fn event_id(n: u64, status: Status) -> String {
    format!("evt_{n:06}_{status}")
}

fn event_parts(id: &str) -> Option<(u64, Status)> {
    let (n, status) = id.strip_prefix("evt_")?.split_once('_')?;
    Some((n.parse().ok()?, status.parse().ok()?))
}

/// The body of the first answer to a send, replayed byte for byte.
pub(crate) fn first_answer(id: &str, key: &str) -> Bytes {
    let view = MessageView {
        id: id.to_string(),
        key: key.to_string(),
        status: Status::Accepted,
        updated_at: None,
    };
    Bytes::from(serde_json::to_vec(&view).expect("a message view always encodes"))
}

pub(crate) fn error_body(text: &str) -> Bytes {
    let body = ErrorBody {
        error: text.to_string(),
    };
    Bytes::from(serde_json::to_vec(&body).expect("an error body always encodes"))
}

enum KeyKind {
    /// The first request is still being processed.
    InProgress,
    Created {
        message: u64,
        answer: Bytes,
    },
    /// The first request faulted before creating anything; the next one is
    /// handled normally.
    Faulted,
}

struct KeyEntry {
    kind: KeyKind,
    fp: Fingerprint,
    /// Lookups answer `404` until then (the lookup lag).
    visible_at: Instant,
    /// The key is forgotten then (the retention).
    expires_at: Instant,
}

impl KeyEntry {
    fn expired(&self, now: Instant) -> bool {
        !matches!(self.kind, KeyKind::InProgress) && self.expires_at <= now
    }
}

/// One status event waiting for (or in) delivery.
#[derive(Debug, Clone)]
struct Event {
    status: Status,
    occurred_at: String,
    attempts_done: u32,
}

struct Message {
    key: Arc<str>,
    status: Status,
    updated_at: String,
    plan: MessagePlan,
    callback: Option<Arc<str>>,
    /// Events to deliver, in order; one delivery task per message drains it.
    outbox: VecDeque<Event>,
    /// An out-of-order `sent` event, released after the final one.
    held: Option<Event>,
    delivering: bool,
    /// No remembered key (or reference) names the message any more; drop it
    /// once it has nothing to do.
    key_gone: bool,
}

impl Message {
    fn settled(&self) -> bool {
        self.status.is_final() && !self.delivering && self.outbox.is_empty() && self.held.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Timer {
    pub due: Instant,
    message: u64,
    /// False: to `sent`; true: to the planned final status.
    to_final: bool,
}

/// What is remembered of a key when a send arrives.
enum Seen {
    Nothing,
    /// Its first request faulted before creating anything.
    Faulted,
    Repeat(Repeat),
}

/// A send whose key is remembered with a request or a message.
enum Repeat {
    InProgress {
        same: bool,
    },
    Created {
        same: bool,
        message: u64,
        answer: Bytes,
    },
}

/// A send that goes on to create its message or to fault, as the first
/// look at it decided; [`State::finish_created`] and
/// [`State::finish_faulted`] are told which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    /// In ignore-key mode, the send's number among its key's sends (from 0);
    /// `None` in the default mode, where the key itself is claimed.
    pub ordinal: Option<u64>,
    /// The time-out fault may apply: no earlier request with this key is
    /// remembered, or (ignore-key mode) to every send.
    pub may_time_out: bool,
}

impl Claim {
    /// The ordinal that the send's fate and plan are drawn by.
    pub fn draw(self) -> u64 {
        self.ordinal.unwrap_or(0)
    }
}

/// What a send that creates its message brings, decided outside the lock.
pub(crate) struct Creation {
    pub callback: Option<Arc<str>>,
    pub plan: MessagePlan,
    /// `AfterCreate` when the answer will be lost; logged on the line.
    pub fault: Option<TimeoutFault>,
}

/// What the first look at a send decided.
pub(crate) enum Begin {
    /// Process the request, then call [`State::finish_created`] or
    /// [`State::finish_faulted`] with the claim.
    Claimed(Claim),
    Replay(Bytes),
    Conflict,
    Reused,
    Overloaded,
}

/// One delivery of one event, prepared under the lock.
#[derive(Debug, Clone)]
pub(crate) struct WebhookJob {
    pub url: Arc<str>,
    pub key: Arc<str>,
    pub event_id: String,
    pub status: Status,
    pub body: Bytes,
    pub next_attempt: u32,
}

/// What a restart found in the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoverySummary {
    /// Complete log lines read.
    pub lines: u64,
    /// Bytes of a torn last line cut off.
    pub torn_bytes: u64,
    /// Keys still remembered.
    pub keys: usize,
    /// Messages still in memory.
    pub messages: usize,
    /// Status changes still to happen.
    pub transitions: usize,
    /// Status events queued for (re)delivery.
    pub webhooks: usize,
}

pub(crate) struct State {
    /// No deduplication: sends are remembered in `refs`, and `keys` and
    /// `expiry` stay empty.
    ignore_key: bool,
    keys: HashMap<Arc<str>, KeyEntry>,
    /// Ignore-key mode's memory (empty in the default mode).
    refs: References,
    messages: HashMap<u64, Message>,
    next_message: u64,
    /// Keys in the order they were settled, to forget them without a scan.
    expiry: VecDeque<(Instant, Arc<str>)>,
    /// Messages whose key was forgotten while they still had work to do.
    lingering: Vec<u64>,
    timers: BinaryHeap<Reverse<Timer>>,
    /// When the scheduler will wake up next (`None`: it waits for a notice).
    pub timer_wake_at: Option<Instant>,
    pub log: LogFile,
}

impl State {
    fn new(log: LogFile, cfg: &FakeConfig) -> Self {
        State {
            ignore_key: cfg.ignore_key,
            keys: HashMap::new(),
            refs: References::new(cfg),
            messages: HashMap::new(),
            next_message: 1,
            expiry: VecDeque::new(),
            lingering: Vec::new(),
            timers: BinaryHeap::new(),
            timer_wake_at: None,
            log,
        }
    }

    fn log_send(
        &mut self,
        key: Option<&str>,
        result: SendResult,
        message: Option<u64>,
        extra: &Extra,
    ) -> Result<u64, LogWriteError> {
        let op = LogOp::Send {
            key: key.map(str::to_string),
            result,
            message_id: message.map(message_id),
        };
        self.log.append(&now_at(), &op, extra)
    }

    /// Logs a refused send (`400`, `401`, `413`): no effect.
    pub fn log_rejected(
        &mut self,
        key: Option<&str>,
        why: &'static str,
    ) -> Result<(), LogWriteError> {
        let extra = Extra {
            fault: Some(Cow::Borrowed(why)),
            ..Extra::default()
        };
        self.log_send(key, SendResult::Rejected, None, &extra)
            .map(drop)
    }

    /// The first look at a valid, authorised send.
    pub fn begin_send(
        &mut self,
        cfg: &FakeConfig,
        key: &str,
        fp: Fingerprint,
        now: Instant,
    ) -> Result<Begin, LogWriteError> {
        if self.ignore_key {
            return self.begin_unkeyed_send(cfg, key, fp);
        }
        if self.keys.get(key).is_some_and(|e| e.expired(now)) {
            self.forget(key);
        }
        let first_ever = match self.seen(key, fp) {
            Seen::Nothing if self.keys.len() >= cfg.keys_max => {
                return self.log_overloaded(key);
            }
            Seen::Nothing => true,
            Seen::Faulted => false,
            Seen::Repeat(repeat) => return self.log_repeat(key, repeat),
        };
        // A new key, a forgotten one, or one whose first request faulted.
        self.keys.insert(
            Arc::from(key),
            KeyEntry {
                kind: KeyKind::InProgress,
                fp,
                visible_at: now + Duration::from_millis(cfg.lookup_lag_ms),
                expires_at: now + Duration::from_millis(cfg.key_retention_ms),
            },
        );
        Ok(Begin::Claimed(Claim {
            ordinal: None,
            may_time_out: first_ever,
        }))
    }

    /// Logs a send refused because `keys_max` is reached (`503`).
    fn log_overloaded(&mut self, key: &str) -> Result<Begin, LogWriteError> {
        let extra = Extra {
            fault: Some(Cow::Borrowed("keys_max")),
            ..Extra::default()
        };
        self.log_send(Some(key), SendResult::Faulted, None, &extra)?;
        Ok(Begin::Overloaded)
    }

    /// What the remembered entry of a key says, copied out so the log can
    /// be written.
    fn seen(&self, key: &str, fp: Fingerprint) -> Seen {
        match self.keys.get(key) {
            None => Seen::Nothing,
            Some(e) => match &e.kind {
                KeyKind::Faulted => Seen::Faulted,
                KeyKind::InProgress => Seen::Repeat(Repeat::InProgress { same: e.fp == fp }),
                KeyKind::Created { message, answer } => Seen::Repeat(Repeat::Created {
                    same: e.fp == fp,
                    message: *message,
                    answer: answer.clone(),
                }),
            },
        }
    }

    /// Logs and answers a repeat of a remembered key. A different body under
    /// a remembered key never makes a message.
    fn log_repeat(&mut self, key: &str, repeat: Repeat) -> Result<Begin, LogWriteError> {
        let plain = Extra::default();
        let (result, message, begin) = match repeat {
            Repeat::InProgress { same: false } => (SendResult::Reused, None, Begin::Reused),
            Repeat::InProgress { same: true } => (SendResult::Conflict, None, Begin::Conflict),
            Repeat::Created {
                same: false,
                message,
                ..
            } => (SendResult::Reused, Some(message), Begin::Reused),
            Repeat::Created {
                same: true,
                message,
                answer,
            } => (SendResult::Replayed, Some(message), Begin::Replay(answer)),
        };
        self.log_send(Some(key), result, message, &plain)?;
        Ok(begin)
    }

    fn claimed(&self, key: &str) -> (Arc<str>, Fingerprint, Instant, Instant) {
        let (k, e) = self
            .keys
            .get_key_value(key)
            .expect("a claimed key stays in the map until it is finished");
        debug_assert!(matches!(e.kind, KeyKind::InProgress));
        (k.clone(), e.fp, e.visible_at, e.expires_at)
    }

    /// Creates the message of a claimed send: the `created` line, then what
    /// remembers it, the message and its first timer. Returns the answer
    /// body and whether the scheduler must be woken.
    pub fn finish_created(
        &mut self,
        key: &str,
        claim: Claim,
        creation: Creation,
        now: Instant,
    ) -> Result<(Bytes, bool), LogWriteError> {
        debug_assert_eq!(claim.ordinal.is_some(), self.ignore_key);
        if let Some(ordinal) = claim.ordinal {
            return self.finish_unkeyed_created(key, ordinal, creation, now);
        }
        let (key, fp, visible_at, expires_at) = self.claimed(key);
        let (n, answer, wake) = match self.create_message(&key, fp, None, creation, now) {
            Ok(created) => created,
            Err(e) => {
                self.keys.remove(&*key);
                return Err(e);
            }
        };
        self.keys.insert(
            key.clone(),
            KeyEntry {
                kind: KeyKind::Created {
                    message: n,
                    answer: answer.clone(),
                },
                fp,
                visible_at,
                expires_at,
            },
        );
        self.expiry.push_back((expires_at, key));
        Ok((answer, wake))
    }

    /// Logs a new message's `created` line, then makes the message and
    /// queues its first timer. Returns the message's number, its answer
    /// body and whether the scheduler must be woken.
    fn create_message(
        &mut self,
        key: &Arc<str>,
        fp: Fingerprint,
        ordinal: Option<u64>,
        creation: Creation,
        now: Instant,
    ) -> Result<(u64, Bytes, bool), LogWriteError> {
        let Creation {
            callback,
            plan,
            fault,
        } = creation;
        let n = self.next_message;
        let id = message_id(n);
        let at = now_at();
        let extra = Extra {
            fp: Some(hex::encode(fp)),
            callback: callback.as_deref().map(str::to_string),
            plan: Some(plan),
            ordinal,
            fault: fault.map(|f| Cow::Borrowed(f.as_str())),
            ..Extra::default()
        };
        let op = LogOp::Send {
            key: Some(key.to_string()),
            result: SendResult::Created,
            message_id: Some(id.clone()),
        };
        self.log.append(&at, &op, &extra)?;
        self.next_message += 1;
        let message = Message {
            key: key.clone(),
            status: Status::Accepted,
            updated_at: at,
            plan,
            callback,
            outbox: VecDeque::new(),
            held: None,
            delivering: false,
            key_gone: false,
        };
        self.messages.insert(n, message);
        let wake = self.push_timer(Timer {
            due: now + Duration::from_millis(plan.sent_ms),
            message: n,
            to_final: false,
        });
        Ok((n, first_answer(&id, key), wake))
    }

    /// Ends a claim without a message: logged `faulted` (answered 5xx before
    /// anything was created).
    pub fn finish_faulted(
        &mut self,
        key: &str,
        claim: Claim,
        why: &'static str,
        now: Instant,
    ) -> Result<(), LogWriteError> {
        debug_assert_eq!(claim.ordinal.is_some(), self.ignore_key);
        if let Some(ordinal) = claim.ordinal {
            return self.finish_unkeyed_faulted(key, ordinal, why, now);
        }
        let (key, fp, visible_at, expires_at) = self.claimed(key);
        let extra = Extra {
            fault: Some(Cow::Borrowed(why)),
            ..Extra::default()
        };
        if let Err(e) = self.log_send(Some(&key), SendResult::Faulted, None, &extra) {
            self.keys.remove(&*key);
            return Err(e);
        }
        self.keys.insert(
            key.clone(),
            KeyEntry {
                kind: KeyKind::Faulted,
                fp,
                visible_at,
                expires_at,
            },
        );
        self.expiry.push_back((expires_at, key));
        Ok(())
    }

    /// Answers a lookup and logs it. `Some(body)` when found.
    pub fn lookup(&mut self, key: &str, now: Instant) -> Result<Option<Bytes>, LogWriteError> {
        let found = self.visible_message(key, now).and_then(|n| {
            self.messages.get(&n).map(|m| MessageView {
                id: message_id(n),
                key: key.to_string(),
                status: m.status,
                updated_at: Some(m.updated_at.clone()),
            })
        });
        let op = LogOp::Lookup {
            key: key.to_string(),
            result: if found.is_some() {
                LookupResult::Found
            } else {
                LookupResult::NotFound
            },
            status: found.as_ref().map(|v| v.status),
        };
        self.log.append(&now_at(), &op, &Extra::default())?;
        Ok(found
            .map(|v| Bytes::from(serde_json::to_vec(&v).expect("a message view always encodes"))))
    }

    /// The message a lookup of `key` finds now: the key's, once its lag has
    /// passed and while it is remembered; in ignore-key mode the earliest
    /// visible one of the reference.
    fn visible_message(&self, key: &str, now: Instant) -> Option<u64> {
        if self.ignore_key {
            return self.refs.visible(key, now);
        }
        match self.keys.get(key) {
            Some(KeyEntry {
                kind: KeyKind::Created { message, .. },
                visible_at,
                expires_at,
                ..
            }) if *expires_at > now && *visible_at <= now => Some(*message),
            _ => None,
        }
    }

    /// Logs a lookup refused because lookups are off: `faulted`, with the
    /// fault [`LOOKUP_NOT_SUPPORTED`].
    pub fn log_lookup_unsupported(&mut self, key: &str) -> Result<(), LogWriteError> {
        let op = LogOp::Lookup {
            key: key.to_string(),
            result: LookupResult::Faulted,
            status: None,
        };
        let extra = Extra {
            fault: Some(Cow::Borrowed(LOOKUP_NOT_SUPPORTED)),
            ..Extra::default()
        };
        self.log.append(&now_at(), &op, &extra).map(drop)
    }

    /// Forgets a key; its message stays until it has nothing left to do.
    fn forget(&mut self, key: &str) {
        let Some(entry) = self.keys.remove(key) else {
            return;
        };
        if let KeyKind::Created { message, .. } = entry.kind {
            self.release(message);
        }
    }

    /// A message that nothing remembered names any more: dropped now if it
    /// has nothing left to do, else once it has.
    fn release(&mut self, n: u64) {
        let Some(m) = self.messages.get_mut(&n) else {
            return;
        };
        m.key_gone = true;
        if m.settled() {
            self.messages.remove(&n);
        } else {
            self.lingering.push(n);
        }
    }

    /// Forgets keys (in ignore-key mode, sends) past their retention and
    /// drops messages with nothing left to do. Returns how many were
    /// forgotten.
    pub fn sweep(&mut self, now: Instant) -> usize {
        let forgotten = if self.ignore_key {
            self.sweep_references(now)
        } else {
            self.sweep_keys(now)
        };
        let messages = &mut self.messages;
        self.lingering.retain(|n| match messages.get(n) {
            Some(m) if m.settled() => {
                messages.remove(n);
                false
            }
            Some(_) => true,
            None => false,
        });
        forgotten
    }

    /// Keys past their retention, in the order they were settled.
    fn sweep_keys(&mut self, now: Instant) -> usize {
        let mut forgotten = 0;
        while let Some((due, _)) = self.expiry.front() {
            if *due > now {
                break;
            }
            let (_, key) = self.expiry.pop_front().expect("peeked");
            if self.keys.get(&key).is_some_and(|e| e.expired(now)) {
                self.forget(&key);
                forgotten += 1;
            }
            // Otherwise the key was claimed again after an earlier expiry and
            // its own, later record follows in the queue.
        }
        forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(to: &str, body: &str, cb: Option<&str>) -> SendRequest {
        SendRequest {
            to: to.into(),
            body: body.into(),
            status_callback: cb.map(str::to_string),
        }
    }

    #[test]
    fn fingerprints_tell_content_apart() {
        let a = fingerprint(&req("+15551234567", "hi", None));
        assert_eq!(a, fingerprint(&req("+15551234567", "hi", None)));
        assert_ne!(a, fingerprint(&req("+15551234567", "hi!", None)));
        assert_ne!(a, fingerprint(&req("+15551234567", "hi", Some(""))));
        // Field boundaries matter: ("ab","c") is not ("a","bc").
        assert_ne!(
            fingerprint(&req("ab", "c", None)),
            fingerprint(&req("a", "bc", None))
        );
    }

    #[test]
    fn ids_round_trip() {
        assert_eq!(message_number(&message_id(42)), Some(42));
        assert_eq!(
            event_parts(&event_id(7, Status::Delivered)),
            Some((7, Status::Delivered))
        );
        assert_eq!(event_parts("evt_x_sent"), None);
        assert_eq!(
            &first_answer("msg_000001", "k")[..],
            br#"{"id":"msg_000001","key":"k","status":"accepted"}"#
        );
    }
}
