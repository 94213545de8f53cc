//! A benchmark job as courier carries it, and the provider its workers use.
//!
//! A job is one action of one of the benchmark's stores ([`store`]); its
//! body starts with the wall clock at its insert, in microseconds
//! (`t=<us> `), then whether it is marked to fail its first attempt
//! (`m=0 ` or `m=1 `), padded to `JOB_PAYLOAD_BYTES`. The provider is the
//! throughput benchmark's stub (with its record and the job's work),
//! wrapped ([`Measured`]) to fail requests as the [`FailPlan`] says and to
//! measure two latencies:
//!
//! - claim latency: from the insert to the job's first request to the
//!   provider in this process, the moment the worker starts it. That is a
//!   send for a fresh job, and a lookup for a reclaimed job whose earlier
//!   worker counted an attempt (it may have sent: the lookup asks), so a job
//!   that waited out a lease is counted too.
//! - end-to-end latency: from the insert to the provider's answer that
//!   completes the job (its send accepted, or its lookup finding the
//!   message); the settle's commit follows within the worker's group commit.
//!
//! A send carries the body, so its insert time is the body's, in
//! microseconds. A lookup carries only the key; courier derives the key from
//! the action's uid, a UUIDv7 whose first 48 bits are the insert's
//! milliseconds ([`key_inserted_us`]). The wall clock, not a monotonic one,
//! because a job inserted before a SIGKILL may start in the next process.
//!
//! # Invariants
//! - A job is measured once per process: at its first request, and its end
//!   at the answer that completes it; the keys in between are held in a map
//!   bounded by [`IN_FLIGHT_MAX`].
//! - A failing answer never creates a message: a retryable one is an
//!   unknown outcome the stub did not act on (courier looks the key up,
//!   finds nothing and sends again), a terminal one a refusal.

use crate::config::{FailMode, FailPlan};
use crate::window::Window;
use courier_dispatch::worker::Provider;
use courier_inproc::StubProvider;
use courier_provider::{LookupOutcome, SendOutcome};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The store of every job when the harness runs one queue.
pub const STORE: &str = "bench";
/// Every job's recipient (the stub sends nothing anywhere).
pub const RECIPIENT: &str = "+15550000000";
/// The most jobs held between their first request and their end: a
/// worker holds at most `WORKER_COUNT`; keys of jobs abandoned to a fence
/// stay until this bound clears the map.
pub const IN_FLIGHT_MAX: usize = 65_536;

/// The store of the job with sequence number `seq` among `queue_count`
/// stores (`BENCH_QUEUE_COUNT`): round-robin.
pub fn store(seq: u64, queue_count: u32) -> String {
    if queue_count <= 1 {
        STORE.to_string()
    } else {
        format!("{STORE}-{}", seq % u64::from(queue_count))
    }
}

/// The body of a job inserted at `at` (wall clock since the epoch).
pub fn body(at: Duration, marked: bool, payload_bytes: usize) -> String {
    let mut b = format!("t={} m={} ", at.as_micros(), u8::from(marked));
    while b.len() < payload_bytes {
        b.push('x');
    }
    b
}

/// The insert time a job's body carries, in microseconds since the epoch.
pub fn inserted_us(body: &str) -> Option<u64> {
    body.strip_prefix("t=")?.split(' ').next()?.parse().ok()
}

/// Whether a job's body marks it to fail its first attempt.
pub fn marked(body: &str) -> bool {
    body.split(' ').nth(1) == Some("m=1")
}

/// The insert time an action's key carries, in microseconds since the
/// epoch, at millisecond precision: `courier-` and the uid's 32 hex digits,
/// of which the first 12 are the milliseconds (UUIDv7, as
/// `courier.uuid_v7()` draws it).
pub fn key_inserted_us(key: &str) -> Option<u64> {
    let hex = key.strip_prefix("courier-")?;
    let ms = u64::from_str_radix(hex.get(..12)?, 16).ok()?;
    (hex.len() == 32).then_some(ms * 1_000)
}

/// The latencies and counts the provider measures, shared with the sampler.
#[derive(Debug)]
pub struct Measures {
    pub claims: Mutex<Window>,
    pub end_to_end: Mutex<Window>,
    /// Jobs started (first request) in this process.
    pub started: AtomicU64,
    /// Jobs whose completing answer this process received.
    pub finished: AtomicU64,
    /// Failing answers given ([`FailPlan`]): retryable and terminal.
    pub failures: AtomicU64,
}

impl Measures {
    pub fn new(window_s: u64) -> Self {
        Measures {
            claims: Mutex::new(Window::new(window_s)),
            end_to_end: Mutex::new(Window::new(window_s)),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }
}

fn record(window: &Mutex<Window>, at: Duration, inserted_us: u64) {
    let latency_us = (at.as_micros() as u64).saturating_sub(inserted_us);
    let mut w = window.lock().unwrap_or_else(|p| p.into_inner());
    w.record(at.as_secs(), latency_us);
}

/// The stub, failing as planned and measuring each job's start and end.
#[derive(Clone)]
pub struct Measured {
    stub: StubProvider,
    fail: FailPlan,
    measures: Arc<Measures>,
    /// Key to the requests sent for it in this process, from the job's
    /// first request to its end. A std mutex: held for one map operation.
    in_flight: Arc<Mutex<HashMap<String, u32>>>,
}

/// What one request of a job does.
enum Answer {
    /// Goes to the stub.
    Stub,
    /// Fails retryably: an unknown outcome, no message created.
    Retryable,
    /// A refusal: no message, the job fails.
    Refused,
}

impl Measured {
    pub fn new(stub: StubProvider, fail: FailPlan, measures: Arc<Measures>) -> Self {
        Measured {
            stub,
            fail,
            measures,
            in_flight: Arc::default(),
        }
    }

    /// Notes a request for `key` at `at`; the job starts at its first one.
    /// Returns the requests for the key so far, this one included (a
    /// lookup is not counted as an attempt).
    fn begin(&self, key: &str, at: Duration, inserted: Option<u64>, send: bool) -> u32 {
        let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(key) {
            if map.len() >= IN_FLIGHT_MAX {
                map.clear();
            }
            map.insert(key.to_string(), 0);
            self.measures.started.fetch_add(1, Ordering::Relaxed);
            if let Some(inserted) = inserted {
                record(&self.measures.claims, at, inserted);
            }
        }
        let sends = map.get_mut(key).expect("inserted above");
        *sends += u32::from(send);
        *sends
    }

    /// The job's end: completed (its end-to-end latency recorded) or not.
    fn end(&self, key: &str, inserted: Option<u64>, completed: bool) {
        let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(key);
        drop(map);
        if completed {
            self.measures.finished.fetch_add(1, Ordering::Relaxed);
            if let Some(inserted) = inserted {
                record(
                    &self.measures.end_to_end,
                    crate::emit::now_since_epoch(),
                    inserted,
                );
            }
        }
    }

    /// The plan's answer to the `attempt`-th request of a job.
    fn answer(&self, marked: bool, attempt: u32) -> Answer {
        let failing = match self.fail.mode {
            FailMode::RefuseAll => return Answer::Refused,
            FailMode::MarkedFailFirst => marked && attempt == 1,
        };
        match (failing, attempt >= self.fail.max_attempts) {
            (false, _) => Answer::Stub,
            (true, false) => Answer::Retryable,
            (true, true) => Answer::Refused,
        }
    }
}

impl Provider for Measured {
    fn send(&self, key: &str, to: &str, body: &str) -> impl Future<Output = SendOutcome> + Send {
        let inserted = inserted_us(body);
        let attempt = self.begin(key, crate::emit::now_since_epoch(), inserted, true);
        let answer = self.answer(marked(body), attempt);
        let sent = matches!(answer, Answer::Stub).then(|| self.stub.send(key, to, body));
        let (this, key) = (self.clone(), key.to_string());
        async move {
            let out = match (answer, sent) {
                (_, Some(sent)) => sent.await,
                (Answer::Refused, _) => {
                    this.measures.failures.fetch_add(1, Ordering::Relaxed);
                    SendOutcome::Rejected {
                        status: 422,
                        error: "synthetic refusal (WORKER_FAIL_MODE / JOB_MAX_ATTEMPTS)".into(),
                    }
                }
                _ => {
                    this.measures.failures.fetch_add(1, Ordering::Relaxed);
                    SendOutcome::Unknown("synthetic 503: first attempt fails".into())
                }
            };
            match &out {
                SendOutcome::Accepted(_) | SendOutcome::Replayed(_) => {
                    this.end(&key, inserted, true)
                }
                SendOutcome::Rejected { .. } => this.end(&key, inserted, false),
                // Sent again later, as after an unknown outcome.
                SendOutcome::NotCreated { .. }
                | SendOutcome::Throttled { .. }
                | SendOutcome::Unknown(_) => {}
            }
            out
        }
    }

    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send {
        let inserted = key_inserted_us(key);
        self.begin(key, crate::emit::now_since_epoch(), inserted, false);
        let looked = self.stub.lookup(key);
        let (this, key) = (self.clone(), key.to_string());
        async move {
            let out = looked.await;
            if let LookupOutcome::Found(_) = &out {
                this.end(&key, inserted, true);
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_carries_its_insert_time_its_mark_and_the_payload_size() {
        let b = body(Duration::from_micros(1_776_416_410_123_456), true, 256);
        assert_eq!(b.len(), 256);
        assert_eq!(inserted_us(&b), Some(1_776_416_410_123_456));
        assert!(marked(&b));
        assert!(!marked(&body(Duration::from_micros(7), false, 256)));
        // A payload smaller than the time keeps the time.
        assert_eq!(
            inserted_us(&body(Duration::from_micros(7), false, 1)),
            Some(7)
        );
        assert_eq!(inserted_us("hello"), None);
    }

    #[test]
    fn a_key_carries_its_insert_millisecond() {
        let key = "courier-019a8f4c2b107a3b8c5d6e7f80912345";
        assert_eq!(key_inserted_us(key), Some(0x019a_8f4c_2b10 * 1_000));
        assert_eq!(key_inserted_us("courier-019a"), None);
        assert_eq!(
            key_inserted_us("other-019a8f4c2b107a3b8c5d6e7f80912345"),
            None
        );
    }

    #[test]
    fn jobs_are_spread_over_the_stores_round_robin() {
        assert_eq!(store(7, 1), "bench");
        let stores: Vec<String> = (0..4).map(|s| store(s, 3)).collect();
        assert_eq!(stores, ["bench-0", "bench-1", "bench-2", "bench-0"]);
    }

    fn provider(fail: FailPlan) -> (Measured, Arc<Measures>) {
        let measures = Arc::new(Measures::new(30));
        (
            Measured::new(StubProvider::new(), fail, measures.clone()),
            measures,
        )
    }

    const SUCCESS: FailPlan = FailPlan {
        mode: FailMode::MarkedFailFirst,
        fail_first_mod: 0,
        max_attempts: 25,
    };

    fn percentiles(w: &Mutex<Window>) -> Option<crate::window::Percentiles> {
        let now = crate::emit::now_since_epoch().as_secs();
        w.lock().unwrap().percentiles(now)
    }

    /// A reclaimed job whose earlier worker may have sent starts with a
    /// lookup: its claim latency (from the key's insert time) is counted,
    /// and so is its end when the lookup finds the message.
    #[tokio::test]
    async fn a_reclaimed_jobs_lookup_starts_and_ends_it() {
        let (p, m) = provider(SUCCESS);
        let now = crate::emit::now_since_epoch();
        // Inserted 6 s ago (it waited out a lease), sent by a killed worker.
        let ms = (now - Duration::from_secs(6)).as_millis() as u64;
        let key = format!("courier-{ms:012x}7a3b8c5d6e7f80912345");
        p.stub.send(&key, RECIPIENT, "t=0 m=0 ").await;
        assert!(matches!(p.lookup(&key).await, LookupOutcome::Found(_)));
        let claim = percentiles(&m.claims).expect("the lookup started the job");
        assert!(
            claim.p50_ms >= 6_000.0 && claim.p50_ms < 7_000.0,
            "{claim:?}"
        );
        assert!(percentiles(&m.end_to_end).expect("ended").p50_ms >= 6_000.0);
        assert_eq!(m.started.load(Ordering::Relaxed), 1);
        assert_eq!(m.finished.load(Ordering::Relaxed), 1);
    }

    /// A job's lookup and send after an unknown outcome are one job: it
    /// starts once and ends once.
    #[tokio::test]
    async fn a_marked_job_fails_its_first_attempt_retryably_then_completes() {
        let (p, m) = provider(FailPlan {
            fail_first_mod: 1,
            ..SUCCESS
        });
        let key = "courier-0000000000017a3b8c5d6e7f80912345";
        let b = body(crate::emit::now_since_epoch(), true, 64);
        assert!(matches!(
            p.send(key, RECIPIENT, &b).await,
            SendOutcome::Unknown(_)
        ));
        assert_eq!(p.stub.messages(), 0, "a failing answer creates nothing");
        assert_eq!(p.lookup(key).await, LookupOutcome::NotFound);
        assert!(matches!(
            p.send(key, RECIPIENT, &b).await,
            SendOutcome::Accepted(_)
        ));
        let counts = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(
            (counts(&m.started), counts(&m.finished), counts(&m.failures)),
            (1, 1, 1)
        );
        assert_eq!(percentiles(&m.claims).unwrap().count, 1);
    }

    #[tokio::test]
    async fn refusals_as_planned() {
        // Out of attempts at the first: the failing answer is a refusal.
        let (p, _) = provider(FailPlan {
            fail_first_mod: 1,
            max_attempts: 1,
            ..SUCCESS
        });
        let b = body(crate::emit::now_since_epoch(), true, 64);
        let out = p.send("courier-a", RECIPIENT, &b).await;
        assert!(matches!(out, SendOutcome::Rejected { status: 422, .. }));
        // terminal-always refuses every request, marked or not.
        let (p, m) = provider(FailPlan {
            mode: FailMode::RefuseAll,
            ..SUCCESS
        });
        let b = body(crate::emit::now_since_epoch(), false, 64);
        let out = p.send("courier-b", RECIPIENT, &b).await;
        assert!(matches!(out, SendOutcome::Rejected { .. }));
        assert_eq!(
            (
                m.finished.load(Ordering::Relaxed),
                m.failures.load(Ordering::Relaxed),
                p.stub.messages()
            ),
            (0, 1, 0)
        );
    }
}
