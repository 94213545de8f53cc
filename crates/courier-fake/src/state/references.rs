//! Ignore-key mode (tiers `b` and `c`): a provider that does not deduplicate.
//!
//! The key of a send is then only the client's reference: every valid send
//! is a new send with its own number among its key's sends (its ordinal,
//! from 0), which draws its time-out fate and its message's plan, and every
//! send that is not lost before creating makes its own message. A lookup
//! finds the earliest-created message of the reference that is visible:
//! `lookup_lag_ms` after that message's own creation, and until its send's
//! retention ends.
//!
//! What is remembered is the send, not the key: each send in flight, each
//! message and each send lost before creating, until `key_retention_ms`
//! after the send ended. `keys_max` bounds their number. A key is dropped
//! when none of its sends is remembered, and its ordinals then start from 0
//! again, as a forgotten key in the default mode meets its first fate again.
//!
//! # Invariants
//! - A send never answers from an earlier one: no replay, `409` or `422`.
//! - The sends of a key remembered at once have distinct ordinals, each one
//!   written on its `created` or `faulted` line.
//! - `remembered` is the number of sends held in `by_key`.

use super::{Begin, Claim, Creation, Fingerprint, State};
use crate::config::FakeConfig;
use crate::logfile::{Extra, LogWriteError};
use bytes::Bytes;
use courier_provider::wire::SendResult;
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every send remembered, by its key.
pub(super) struct References {
    by_key: HashMap<Arc<str>, Reference>,
    /// Sends held in `by_key`, over all keys: what `keys_max` bounds.
    remembered: usize,
    /// `(expires_at, key)` of each ended send, in the order they ended, to
    /// forget them without a scan.
    expiry: VecDeque<(Instant, Arc<str>)>,
    lag: Duration,
    retention: Duration,
}

/// The sends of one key.
struct Reference {
    /// The ordinal of the key's next send.
    next_ordinal: u64,
    /// In the order they were claimed.
    sends: Vec<RefSend>,
}

struct RefSend {
    ordinal: u64,
    kind: SendKind,
}

enum SendKind {
    /// Still waiting out its latency before its effect or its fault.
    InFlight { fp: Fingerprint },
    /// It created this message.
    Created {
        message: u64,
        /// A lookup can find the message from then on (the lag).
        visible_at: Instant,
        /// The send is forgotten then (the retention).
        expires_at: Instant,
    },
    /// It was lost before creating anything (a time-out, a shutdown).
    Faulted { expires_at: Instant },
}

impl SendKind {
    fn expired(&self, now: Instant) -> bool {
        match self {
            SendKind::InFlight { .. } => false,
            SendKind::Created { expires_at, .. } | SendKind::Faulted { expires_at } => {
                *expires_at <= now
            }
        }
    }
}

/// One send read back from the log by recovery.
pub(super) struct RestoredSend {
    pub ordinal: u64,
    /// `None`: the send was lost before creating anything.
    pub message: Option<u64>,
    pub visible_at: Instant,
    pub expires_at: Instant,
}

impl References {
    pub fn new(cfg: &FakeConfig) -> Self {
        References {
            by_key: HashMap::new(),
            remembered: 0,
            expiry: VecDeque::new(),
            lag: Duration::from_millis(cfg.lookup_lag_ms),
            retention: Duration::from_millis(cfg.key_retention_ms),
        }
    }

    /// Keys with at least one send remembered.
    pub fn keys(&self) -> usize {
        self.by_key.len()
    }

    /// The earliest-created message of `key` that a lookup finds now.
    pub fn visible(&self, key: &str, now: Instant) -> Option<u64> {
        self.by_key
            .get(key)?
            .sends
            .iter()
            .filter_map(|s| match s.kind {
                SendKind::Created {
                    message,
                    visible_at,
                    expires_at,
                } if visible_at <= now && now < expires_at => Some(message),
                _ => None,
            })
            // Message numbers are given in the order of creation.
            .min()
    }

    /// Whether a remembered send of `key` created message `n`.
    pub fn names(&self, key: &str, n: u64) -> bool {
        self.by_key.get(key).is_some_and(|r| {
            r.sends
                .iter()
                .any(|s| matches!(s.kind, SendKind::Created { message, .. } if message == n))
        })
    }

    /// Remembers a new send of `key` in flight; returns its ordinal.
    fn claim(&mut self, key: &str, fp: Fingerprint) -> u64 {
        let reference = self
            .by_key
            .entry(Arc::from(key))
            .or_insert_with(|| Reference {
                next_ordinal: 0,
                sends: Vec::new(),
            });
        let ordinal = reference.next_ordinal;
        reference.next_ordinal += 1;
        reference.sends.push(RefSend {
            ordinal,
            kind: SendKind::InFlight { fp },
        });
        self.remembered += 1;
        ordinal
    }

    /// The key (as held) and fingerprint of a send in flight.
    fn in_flight(&self, key: &str, ordinal: u64) -> (Arc<str>, Fingerprint) {
        let (k, r) = self
            .by_key
            .get_key_value(key)
            .expect("a send in flight keeps its key remembered");
        let fp = r.sends.iter().find_map(|s| match s.kind {
            SendKind::InFlight { fp } if s.ordinal == ordinal => Some(fp),
            _ => None,
        });
        (
            k.clone(),
            fp.expect("a claimed send stays in flight until it ends"),
        )
    }

    /// A send in flight has ended: it created `message`, or nothing.
    fn end(&mut self, key: &Arc<str>, ordinal: u64, message: Option<u64>, now: Instant) {
        let expires_at = now + self.retention;
        let kind = match message {
            Some(message) => SendKind::Created {
                message,
                visible_at: now + self.lag,
                expires_at,
            },
            None => SendKind::Faulted { expires_at },
        };
        if let Some(s) = self.send_mut(key, ordinal) {
            s.kind = kind;
            self.expiry.push_back((expires_at, key.clone()));
        }
    }

    /// Forgets a send in flight whose line could not be written.
    fn abandon(&mut self, key: &str, ordinal: u64) {
        let Some(r) = self.by_key.get_mut(key) else {
            return;
        };
        let before = r.sends.len();
        r.sends.retain(|s| s.ordinal != ordinal);
        self.remembered -= before - r.sends.len();
        if r.sends.is_empty() {
            self.by_key.remove(key);
        }
    }

    fn send_mut(&mut self, key: &str, ordinal: u64) -> Option<&mut RefSend> {
        let r = self.by_key.get_mut(key)?;
        r.sends.iter_mut().find(|s| s.ordinal == ordinal)
    }

    /// Forgets the sends past their retention. Returns how many were
    /// forgotten and the messages no send names any more.
    fn expire(&mut self, now: Instant) -> (usize, Vec<u64>) {
        let mut forgotten = 0;
        let mut released = Vec::new();
        while let Some((due, _)) = self.expiry.front() {
            if *due > now {
                break;
            }
            let (_, key) = self.expiry.pop_front().expect("peeked");
            // Sends of this key that ended later stay, with records of
            // their own later in the queue.
            let Some(r) = self.by_key.get_mut(&key) else {
                continue;
            };
            r.sends.retain(|s| {
                if !s.kind.expired(now) {
                    return true;
                }
                if let SendKind::Created { message, .. } = s.kind {
                    released.push(message);
                }
                forgotten += 1;
                false
            });
            if r.sends.is_empty() {
                self.by_key.remove(&key);
            }
        }
        self.remembered -= forgotten;
        (forgotten, released)
    }

    /// Puts back the sends of `key` still within their retention, as
    /// recovery read them. The key's next ordinal follows the highest: the
    /// count restarts only when none of a key's sends is remembered, so the
    /// remembered ones all carry the current count.
    pub fn restore(&mut self, key: Arc<str>, mut sends: Vec<RestoredSend>) {
        let Some(highest) = sends.iter().map(|s| s.ordinal).max() else {
            return;
        };
        sends.sort_by_key(|s| s.ordinal);
        let sends: Vec<RefSend> = sends
            .into_iter()
            .map(|s| {
                self.expiry.push_back((s.expires_at, key.clone()));
                let kind = match s.message {
                    Some(message) => SendKind::Created {
                        message,
                        visible_at: s.visible_at,
                        expires_at: s.expires_at,
                    },
                    None => SendKind::Faulted {
                        expires_at: s.expires_at,
                    },
                };
                RefSend {
                    ordinal: s.ordinal,
                    kind,
                }
            })
            .collect();
        self.remembered += sends.len();
        let reference = Reference {
            next_ordinal: highest + 1,
            sends,
        };
        self.by_key.insert(key, reference);
    }

    /// Puts the expiry queue in order once every key is restored.
    pub fn sort_expiry(&mut self) {
        self.expiry.make_contiguous().sort();
    }
}

impl State {
    /// The first look at a send in ignore-key mode: a new send of its key,
    /// unless `keys_max` sends are remembered.
    pub(super) fn begin_unkeyed_send(
        &mut self,
        cfg: &FakeConfig,
        key: &str,
        fp: Fingerprint,
    ) -> Result<Begin, LogWriteError> {
        if self.refs.remembered >= cfg.keys_max {
            return self.log_overloaded(key);
        }
        let ordinal = self.refs.claim(key, fp);
        Ok(Begin::Claimed(Claim {
            ordinal: Some(ordinal),
            may_time_out: true,
        }))
    }

    /// Creates the message of a send in flight (see [`State::finish_created`]).
    pub(super) fn finish_unkeyed_created(
        &mut self,
        key: &str,
        ordinal: u64,
        creation: Creation,
        now: Instant,
    ) -> Result<(Bytes, bool), LogWriteError> {
        let (key, fp) = self.refs.in_flight(key, ordinal);
        match self.create_message(&key, fp, Some(ordinal), creation, now) {
            Ok((n, answer, wake)) => {
                self.refs.end(&key, ordinal, Some(n), now);
                Ok((answer, wake))
            }
            Err(e) => {
                self.refs.abandon(&key, ordinal);
                Err(e)
            }
        }
    }

    /// Ends a send in flight without a message: logged `faulted`.
    pub(super) fn finish_unkeyed_faulted(
        &mut self,
        key: &str,
        ordinal: u64,
        why: &'static str,
        now: Instant,
    ) -> Result<(), LogWriteError> {
        let (key, _) = self.refs.in_flight(key, ordinal);
        let extra = Extra {
            fault: Some(Cow::Borrowed(why)),
            ordinal: Some(ordinal),
            ..Extra::default()
        };
        match self.log_send(Some(&key), SendResult::Faulted, None, &extra) {
            Ok(_) => {
                self.refs.end(&key, ordinal, None, now);
                Ok(())
            }
            Err(e) => {
                self.refs.abandon(&key, ordinal);
                Err(e)
            }
        }
    }

    /// Forgets the sends past their retention (see [`State::sweep`]).
    pub(super) fn sweep_references(&mut self, now: Instant) -> usize {
        let (forgotten, released) = self.refs.expire(now);
        for n in released {
            self.release(n);
        }
        forgotten
    }
}
