//! Helpers of the fake provider's contract tests: a provider on a temporary
//! log, a client that speaks the contract over real HTTP, a webhook receiver
//! on its own port, and log readers that check the log's own invariants.
#![allow(dead_code)]

use bytes::Bytes;
use courier_fake::{self as fake, FakeConfig, FakeHandle, FaultRates, MsRange};
use courier_provider::wire::{LogEntry, LogOp, SendResult, WebhookEvent};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub const API_KEY: &str = "test-api-key";
pub const SECRET: &str = "test-webhook-secret";
pub const PHONE: &str = "+15551234567";

/// A bound on every wait in these tests: generous for a loaded 2-core machine,
/// and a failure rather than a hang when a condition never comes.
pub const WAIT: Duration = Duration::from_secs(20);

/// A temporary directory holding the provider's log.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("provider.jsonl");
        Scratch { dir, log }
    }

    /// Fast, fault-free settings: every option a test changes means something.
    pub fn config(&self) -> FakeConfig {
        let mut cfg = FakeConfig::new(&self.log, API_KEY, SECRET);
        cfg.faults = FaultRates::NONE;
        cfg.sent_after_ms = MsRange::new(1, 5);
        cfg.delivered_after_ms = MsRange::new(1, 5);
        cfg.failed_after_ms = MsRange::new(5, 10);
        cfg.timeout_hold_ms = 20;
        cfg.webhook_backoff_base_ms = 10;
        cfg.webhook_backoff_cap_ms = 50;
        cfg.webhook_timeout_ms = 2_000;
        cfg
    }
}

pub async fn start(cfg: FakeConfig) -> FakeHandle {
    fake::start(cfg).await.expect("the fake provider starts")
}

/// One HTTP answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub content_type: Option<String>,
    /// The `Retry-After` header (a `429` of the fake's rate limit).
    pub retry_after: Option<String>,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("answer {} is not JSON ({e}): {:?}", self.status, self.body))
    }
    /// The `error` field of an error answer (asserting its shape).
    pub fn error(&self) -> String {
        let v = self.json();
        let text = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field: {v}"));
        assert!(!text.is_empty());
        assert_eq!(self.content_type.as_deref(), Some("application/json"));
        text.to_string()
    }
}

/// A client that speaks the contract, with every part overridable.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
}

pub fn body_json(to: &str, text: &str, callback: Option<&str>) -> String {
    let mut v = serde_json::json!({ "to": to, "body": text });
    if let Some(cb) = callback {
        v["status_callback"] = serde_json::Value::String(cb.to_string());
    }
    v.to_string()
}

impl Api {
    pub fn new(handle: &FakeHandle) -> Self {
        Api {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(256)
                .build()
                .expect("a client"),
            base: handle.url(),
        }
    }

    async fn answer(resp: reqwest::Response) -> Answer {
        let status = resp.status().as_u16();
        let replayed = resp
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = resp.bytes().await.expect("an answer body");
        Answer {
            status,
            replayed,
            content_type,
            retry_after,
            body,
        }
    }

    /// A send with full control of the headers and the raw body.
    pub async fn send_raw(
        &self,
        auth: Option<&str>,
        key_header: Option<&[u8]>,
        body: impl Into<reqwest::Body>,
    ) -> Answer {
        let mut req = self
            .http
            .post(format!("{}/v1/messages", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        if let Some(k) = key_header {
            req = req.header(
                "idempotency-key",
                reqwest::header::HeaderValue::from_bytes(k).expect("a header value"),
            );
        }
        Self::answer(req.send().await.expect("the provider answers")).await
    }

    /// A well-formed send (quoted key, correct auth).
    pub async fn send(&self, key: &str, text: &str, callback: Option<&str>) -> Answer {
        let header = courier_core::key::quote_key(key);
        self.send_raw(
            Some(&format!("Bearer {API_KEY}")),
            Some(header.as_bytes()),
            body_json(PHONE, text, callback),
        )
        .await
    }

    pub async fn lookup_raw(&self, auth: Option<&str>, path_key: &str) -> Answer {
        let mut req = self
            .http
            .get(format!("{}/v1/messages/{path_key}", self.base));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        Self::answer(req.send().await.expect("the provider answers")).await
    }

    pub async fn lookup(&self, key: &str) -> Answer {
        self.lookup_raw(Some(&format!("Bearer {API_KEY}")), key)
            .await
    }
}

/// Reads the whole log and checks it: every line parses as a `LogEntry` and
/// `seq` runs 1..=N without gaps. For a log no one writes any more (after
/// shutdown); while the provider runs, poll with [`read_log_so_far`].
pub fn read_log(path: &Path) -> Vec<LogEntry> {
    let text = std::fs::read_to_string(path).expect("the log is readable");
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the log ends mid-line"
    );
    parse_log(&text)
}

/// The log's complete lines so far, checked as [`read_log`] checks them: a
/// reader polling a running provider can catch its last line half written
/// (a fresh-machine CI run did), which is not yet an entry.
pub fn read_log_so_far(path: &Path) -> Vec<LogEntry> {
    let text = std::fs::read_to_string(path).expect("the log is readable");
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    parse_log(complete)
}

fn parse_log(text: &str) -> Vec<LogEntry> {
    let entries: Vec<LogEntry> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("line {} does not parse ({e}): {l}", i + 1))
        })
        .collect();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "seq gap at line {}", i + 1);
    }
    entries
}

/// The log's lines as raw JSON (to see the fake's own extra fields).
pub fn read_log_raw(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the log is readable")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect()
}

/// Lines of the log containing `needle` (cheap enough to poll).
pub fn lines_with(path: &Path, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| l.contains(needle)).count())
        .unwrap_or(0)
}

pub fn sends_with(log: &[LogEntry], key: &str, result: SendResult) -> usize {
    log.iter()
        .filter(|e| matches!(&e.op, LogOp::Send { key: Some(k), result: r, .. } if k == key && *r == result))
        .count()
}

pub fn count(log: &[LogEntry], f: impl Fn(&LogOp) -> bool) -> usize {
    log.iter().filter(|e| f(&e.op)).count()
}

/// Polls `cond` until it holds or `WAIT` passes; for conditions with no
/// signal to wait on (the log file).
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One webhook as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub raw: Bytes,
    pub signature: Option<String>,
    pub event: WebhookEvent,
    /// What the receiver answered.
    pub answered: u16,
}

type Policy = dyn Fn(&WebhookEvent, u32) -> u16 + Send + Sync;

/// A webhook receiver on its own loopback port. Its policy decides the
/// status code from the event and how many times that event was seen.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    seen: Arc<Mutex<Vec<Received>>>,
    counts: Arc<Mutex<HashMap<String, u32>>>,
    /// Distinct events answered 2xx at least once.
    accepted: Arc<Mutex<std::collections::HashSet<String>>>,
    changed: Arc<Notify>,
    policy: Arc<Mutex<Arc<Policy>>>,
}

impl Receiver {
    pub async fn start(
        policy: impl Fn(&WebhookEvent, u32) -> u16 + Send + Sync + 'static,
    ) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hooks", listener.local_addr().expect("addr"));
        let r = Receiver {
            url,
            seen: Arc::default(),
            counts: Arc::default(),
            accepted: Arc::default(),
            changed: Arc::new(Notify::new()),
            policy: Arc::new(Mutex::new(Arc::new(policy))),
        };
        let state = r.clone();
        let app = axum::Router::new().route(
            "/hooks",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
                let state = state.clone();
                async move {
                    let event: WebhookEvent =
                        serde_json::from_slice(&body).expect("a webhook event");
                    let nth = {
                        let mut c = state.counts.lock().unwrap();
                        let n = c.entry(event.event_id.clone()).or_insert(0);
                        *n += 1;
                        *n
                    };
                    let policy = state.policy.lock().unwrap().clone();
                    let answered = policy(&event, nth);
                    if (200..300).contains(&answered) {
                        state
                            .accepted
                            .lock()
                            .unwrap()
                            .insert(event.event_id.clone());
                    }
                    state.seen.lock().unwrap().push(Received {
                        raw: body,
                        signature: headers
                            .get("x-signature")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string),
                        event,
                        answered,
                    });
                    state.changed.notify_waiters();
                    axum::http::StatusCode::from_u16(answered).expect("a status code")
                }
            }),
        );
        tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the receiver serves");
        });
        r
    }

    pub fn set_policy(&self, policy: impl Fn(&WebhookEvent, u32) -> u16 + Send + Sync + 'static) {
        *self.policy.lock().unwrap() = Arc::new(policy);
    }

    pub fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits (on the receiver's own signal) until `n` distinct events were
    /// answered 2xx.
    pub async fn wait_accepted(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let have = self.accepted.lock().unwrap().len();
            if have >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("timed out waiting for {n} accepted events ({have} so far)");
            }
        }
    }

    /// Waits (on the receiver's own signal) until `cond` holds of what it saw.
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let seen = self.seen.lock().unwrap();
                if cond(&seen) {
                    return seen.clone();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let n = self.seen.lock().unwrap().len();
                panic!("timed out waiting for {what} ({n} webhooks received)");
            }
        }
    }
}
