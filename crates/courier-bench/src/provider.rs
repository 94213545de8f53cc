//! `courier bench provider`: the fake provider's own benchmark, a fake on loopback (faults off, latency 0,
//! default status timings), driven through the real HTTP path by a keep-alive
//! hyper client with many requests in flight, each with a unique key.
//!
//! It measures what the rest of the project leans on: that the provider is
//! never the bottleneck. The figure includes the client's own cost, since
//! both run in this process on the same cores.

use crate::BenchError;
use bytes::Bytes;
use courier_fake::{start, FakeConfig, FaultRates, Latency};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::header;
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest number of sends in one run.
pub const SENDS_MAX: u64 = 100_000_000;
/// The most requests in flight at once.
pub const CONCURRENCY_MAX: usize = 4096;

#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Sends to make (the run also stops after `seconds`, if given).
    pub sends: u64,
    /// Requests in flight at once.
    pub concurrency: usize,
    pub seconds: Option<u64>,
    /// The provider's log; `None`: a temporary file, removed afterwards.
    pub log_path: Option<PathBuf>,
}

impl BenchConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=SENDS_MAX).contains(&self.sends) {
            return Err(format!("--sends must be within 1..={SENDS_MAX}"));
        }
        if !(1..=CONCURRENCY_MAX).contains(&self.concurrency) {
            return Err(format!(
                "--concurrency must be within 1..={CONCURRENCY_MAX}"
            ));
        }
        if self.seconds == Some(0) || self.seconds.is_some_and(|s| s > 3600) {
            return Err("--seconds must be within 1..=3600".into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Sends answered `201`.
    pub sends: u64,
    /// Sends answered otherwise or not at all.
    pub errors: u64,
    pub elapsed: Duration,
    pub sends_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Lines the provider wrote (requests and effects), checked against the file.
    pub log_lines: u64,
    pub log_bytes: u64,
}

/// Runs the benchmark and returns its measurements.
pub async fn run(cfg: BenchConfig) -> Result<BenchReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let (log_path, temporary) = match &cfg.log_path {
        Some(p) => (p.clone(), false),
        None => (
            std::env::temp_dir().join(format!(
                "courier-bench-{}-{stamp}.jsonl",
                std::process::id()
            )),
            true,
        ),
    };
    let mut fake = FakeConfig::new(&log_path, "bench-key", "bench-secret");
    fake.faults = FaultRates::NONE;
    fake.latency = Latency::ZERO;
    let result = drive(&cfg, fake, stamp).await;
    if temporary {
        let _ = std::fs::remove_file(&log_path);
    }
    result
}

/// The client every sender shares: keep-alive, one idle connection per sender.
type Http = Client<HttpConnector, Full<Bytes>>;

async fn drive(
    cfg: &BenchConfig,
    fake: FakeConfig,
    stamp: u128,
) -> Result<BenchReport, BenchError> {
    let log_path = fake.log_path.clone();
    let handle = start(fake).await?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Http = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(cfg.concurrency)
        .build(connector);
    let uri: hyper::Uri = format!("{}/v1/messages", handle.url())
        .parse()
        .expect("a loopback URL parses");
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = cfg.seconds.map(|s| started + Duration::from_secs(s));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..cfg.concurrency {
        let sender = Sender {
            client: client.clone(),
            uri: uri.clone(),
            next: next.clone(),
            sends: cfg.sends,
            deadline,
            stamp,
        };
        workers.spawn(sender.run());
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let (mut sends, mut errors) = (0, 0);
    while let Some(done) = workers.join_next().await {
        let (h, ok, err) = done?;
        hist.add(h).expect("same bounds");
        sends += ok;
        errors += err;
    }
    let elapsed = started.elapsed();
    drop(client);
    handle.shutdown().await?;
    let text = std::fs::read(&log_path)?;
    let log_lines = log_lines_checked(&text)?;
    Ok(BenchReport {
        sends,
        errors,
        elapsed,
        sends_per_s: sends as f64 / elapsed.as_secs_f64().max(1e-9),
        p50_us: hist.value_at_quantile(0.50),
        p99_us: hist.value_at_quantile(0.99),
        max_us: hist.max(),
        log_lines,
        log_bytes: text.len() as u64,
    })
}

/// One request in flight at a time, sends numbered from a shared counter.
struct Sender {
    client: Http,
    uri: hyper::Uri,
    next: Arc<AtomicU64>,
    sends: u64,
    deadline: Option<Instant>,
    stamp: u128,
}

impl Sender {
    /// Sends until the count or the time is reached; its latencies and how
    /// many sends were created and how many not.
    async fn run(self) -> (Histogram<u64>, u64, u64) {
        let mut hist =
            Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds");
        let (mut ok, mut errors) = (0u64, 0u64);
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.sends || self.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let req = self.request(i);
            let t = Instant::now();
            let created = self.send(req).await;
            hist.saturating_record(t.elapsed().as_micros().max(1) as u64);
            if created {
                ok += 1;
            } else {
                errors += 1;
            }
        }
        (hist, ok, errors)
    }

    /// Send `i`, with its own key.
    fn request(&self, i: u64) -> Request<Full<Bytes>> {
        let body = format!(
            r#"{{"to":"+1555{:07}","body":"bench message {i}"}}"#,
            i % 10_000_000
        );
        Request::post(self.uri.clone())
            .header(header::AUTHORIZATION, "Bearer bench-key")
            .header("idempotency-key", format!("bench-{}-{i}", self.stamp))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("a well-formed request")
    }

    /// True when answered `201`.
    async fn send(&self, req: Request<Full<Bytes>>) -> bool {
        match self.client.request(req).await {
            Ok(resp) => {
                let status = resp.status();
                resp.into_body().collect().await.is_ok() && status.as_u16() == 201
            }
            Err(_) => false,
        }
    }
}

/// The lines of the log, counted in the file and read from its last line
/// (the last seq); they must agree.
fn log_lines_checked(text: &[u8]) -> Result<u64, BenchError> {
    let in_file = text.iter().filter(|b| **b == b'\n').count() as u64;
    let last = text
        .strip_suffix(b"\n")
        .and_then(|t| t.rsplit(|b| *b == b'\n').next())
        .and_then(|l| serde_json::from_slice::<courier_provider::wire::LogEntry>(l).ok())
        .map_or(0, |e| e.seq);
    if last != in_file {
        return Err(BenchError::LogMismatch {
            counted: last,
            in_file,
        });
    }
    Ok(last)
}
