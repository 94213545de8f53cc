//! The provider's live memory (keys, messages, timers, webhook queues) and
//! the decisions that change it. Its rebuilding from the log after a
//! restart is [`recovery`].
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
//! - While a key is remembered it names at most one message.
//! - A message's status only moves forward: `accepted -> sent -> final`, one
//!   final status, each step one `status` line at the moment it happens.

mod recovery;

use crate::config::FakeConfig;
use crate::fate::{MessagePlan, TimeoutFault};
use crate::logfile::{Extra, LogFile, LogWriteError};
use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use courier_core::Status;
use courier_provider::wire::{
    ErrorBody, LogOp, LookupResult, MessageView, SendRequest, SendResult, WebhookAnswer,
    WebhookEvent,
};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How late a status change may fire to share a scheduler wake-up.
const TIMER_SLACK: Duration = Duration::from_millis(2);

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
    /// The key was forgotten; drop the message once it has nothing to do.
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

/// What the first look at a send decided.
pub(crate) enum Begin {
    /// The key is claimed: process the request, then call
    /// [`State::finish_created`] or [`State::finish_faulted`].
    Claimed {
        /// No earlier request with this key is remembered, so the time-out
        /// fault may apply.
        first_ever: bool,
    },
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
    keys: HashMap<Arc<str>, KeyEntry>,
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
    fn new(log: LogFile) -> Self {
        State {
            keys: HashMap::new(),
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
        if self.keys.get(key).is_some_and(|e| e.expired(now)) {
            self.forget(key);
        }
        let first_ever = match self.seen(key, fp) {
            Seen::Nothing if self.keys.len() >= cfg.keys_max => {
                let extra = Extra {
                    fault: Some(Cow::Borrowed("keys_max")),
                    ..Extra::default()
                };
                self.log_send(Some(key), SendResult::Faulted, None, &extra)?;
                return Ok(Begin::Overloaded);
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
        Ok(Begin::Claimed { first_ever })
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

    /// Creates the message of a claimed key: the `created` line, then the key,
    /// the message and its first timer. Returns the answer body and whether
    /// the scheduler must be woken.
    pub fn finish_created(
        &mut self,
        key: &str,
        callback: Option<Arc<str>>,
        plan: MessagePlan,
        fault: Option<TimeoutFault>,
        now: Instant,
    ) -> Result<(Bytes, bool), LogWriteError> {
        let (key, fp, visible_at, expires_at) = self.claimed(key);
        let n = self.next_message;
        let id = message_id(n);
        let at = now_at();
        let extra = Extra {
            fp: Some(hex::encode(fp)),
            callback: callback.as_deref().map(str::to_string),
            plan: Some(plan),
            fault: fault.map(|f| Cow::Borrowed(f.as_str())),
            ..Extra::default()
        };
        let op = LogOp::Send {
            key: Some(key.to_string()),
            result: SendResult::Created,
            message_id: Some(id.clone()),
        };
        if let Err(e) = self.log.append(&at, &op, &extra) {
            self.keys.remove(&*key);
            return Err(e);
        }
        self.next_message += 1;
        let answer = first_answer(&id, &key);
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
        self.expiry.push_back((expires_at, key.clone()));
        self.messages.insert(
            n,
            Message {
                key,
                status: Status::Accepted,
                updated_at: at,
                plan,
                callback,
                outbox: VecDeque::new(),
                held: None,
                delivering: false,
                key_gone: false,
            },
        );
        let wake = self.push_timer(Timer {
            due: now + Duration::from_millis(plan.sent_ms),
            message: n,
            to_final: false,
        });
        Ok((answer, wake))
    }

    /// Ends a claim without a message: logged `faulted` (answered 5xx before
    /// anything was created).
    pub fn finish_faulted(&mut self, key: &str, why: &'static str) -> Result<(), LogWriteError> {
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
        let found = match self.keys.get(key) {
            Some(KeyEntry {
                kind: KeyKind::Created { message, .. },
                visible_at,
                expires_at,
                ..
            }) if *expires_at > now && *visible_at <= now => {
                self.messages.get(message).map(|m| MessageView {
                    id: message_id(*message),
                    key: key.to_string(),
                    status: m.status,
                    updated_at: Some(m.updated_at.clone()),
                })
            }
            _ => None,
        };
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

    /// Queues a timer; true when the scheduler must be woken for it: it is
    /// idle, or the timer is due well before its next wake-up. Timers within
    /// [`TIMER_SLACK`] of that wake-up wait for it, which saves a wake-up per
    /// message at high send rates and delays a status change by at most that.
    fn push_timer(&mut self, t: Timer) -> bool {
        let due = t.due;
        self.timers.push(Reverse(t));
        if self.timer_wake_at.is_none_or(|w| due + TIMER_SLACK < w) {
            self.timer_wake_at = Some(due);
            true
        } else {
            false
        }
    }

    /// The earliest pending timer.
    pub fn next_due(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse(t)| t.due)
    }

    /// Applies every status change due by `now`, logging them in one write.
    /// Returns the messages whose webhook delivery must be started.
    pub fn fire_due(&mut self, now: Instant) -> Result<Vec<u64>, LogWriteError> {
        let mut starts = Vec::new();
        let mut at: Option<String> = None;
        let mut follow_ups = Vec::new();
        while let Some(Reverse(t)) = self.timers.peek().copied() {
            if t.due > now {
                break;
            }
            self.timers.pop();
            let Some(m) = self.messages.get_mut(&t.message) else {
                continue;
            };
            let to = if t.to_final {
                m.plan.final_status
            } else {
                Status::Sent
            };
            if m.status.rank() >= to.rank() {
                continue;
            }
            debug_assert!(!m.status.is_final(), "a final status never changes");
            let at = at.get_or_insert_with(now_at).clone();
            let op = LogOp::Status {
                key: m.key.to_string(),
                message_id: message_id(t.message),
                status: to,
                is_final: to.is_final(),
            };
            self.log.stage(&at, &op, &Extra::default())?;
            m.status = to;
            m.updated_at.clone_from(&at);
            if !to.is_final() {
                follow_ups.push(Timer {
                    due: now + Duration::from_millis(m.plan.final_ms),
                    message: t.message,
                    to_final: true,
                });
            }
            if m.callback.is_some() {
                let event = Event {
                    status: to,
                    occurred_at: at,
                    attempts_done: 0,
                };
                if to == Status::Sent && m.plan.out_of_order {
                    m.held = Some(event);
                } else {
                    m.outbox.push_back(event);
                    if let Some(held) = m.held.take() {
                        m.outbox.push_back(held);
                    }
                    if !m.delivering {
                        m.delivering = true;
                        starts.push(t.message);
                    }
                }
            }
        }
        self.log.commit()?;
        for t in follow_ups {
            self.push_timer(t);
        }
        Ok(starts)
    }

    /// The next event of a message to deliver, or `None` (the message's
    /// delivery task then ends).
    pub fn next_webhook(&mut self, n: u64, cfg: &FakeConfig) -> Option<WebhookJob> {
        let m = self.messages.get_mut(&n)?;
        loop {
            let (Some(event), Some(url)) = (m.outbox.pop_front(), m.callback.clone()) else {
                m.delivering = false;
                if m.key_gone && m.settled() {
                    self.messages.remove(&n);
                }
                return None;
            };
            if event.attempts_done >= cfg.webhook_attempts_max {
                continue;
            }
            let event_id = event_id(n, event.status);
            let body = WebhookEvent {
                event_id: event_id.clone(),
                message_id: message_id(n),
                key: m.key.to_string(),
                status: event.status,
                occurred_at: event.occurred_at,
            };
            return Some(WebhookJob {
                url,
                key: m.key.clone(),
                event_id,
                status: event.status,
                body: Bytes::from(serde_json::to_vec(&body).expect("an event always encodes")),
                next_attempt: event.attempts_done + 1,
            });
        }
    }

    /// Logs one webhook attempt.
    pub fn log_webhook(
        &mut self,
        job: &WebhookJob,
        attempt: u32,
        answer: WebhookAnswer,
        extra: &Extra,
    ) -> Result<(), LogWriteError> {
        let op = LogOp::Webhook {
            key: job.key.to_string(),
            event_id: job.event_id.clone(),
            status: job.status,
            attempt,
            answer,
        };
        self.log.append(&now_at(), &op, extra).map(drop)
    }

    /// Forgets a key; its message stays until it has nothing left to do.
    fn forget(&mut self, key: &str) {
        let Some(entry) = self.keys.remove(key) else {
            return;
        };
        if let KeyKind::Created { message, .. } = entry.kind {
            if let Some(m) = self.messages.get_mut(&message) {
                m.key_gone = true;
                if m.settled() {
                    self.messages.remove(&message);
                } else {
                    self.lingering.push(message);
                }
            }
        }
    }

    /// Forgets keys past their retention; drops messages with nothing left to do.
    pub fn sweep(&mut self, now: Instant) -> usize {
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
