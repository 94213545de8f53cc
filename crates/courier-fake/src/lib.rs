//! courier-fake: the flaky fake SMS provider: a real HTTP server that follows
//! `docs/provider-api.md` to the letter, injects seeded faults, and keeps the
//! append-only log that every verification reads.
//!
//! The parts:
//! - [`config`]: [`FakeConfig`], the latency and range syntax, `validate()`.
//! - `fate`: seeded decisions, a pure function of (seed, key or event).
//! - `logfile`: the single log writer and the reader used on restart.
//! - `state`: keys, messages, timers and webhook queues; every change is
//!   logged in the same critical section. `state/recovery` rebuilds them
//!   from the log after a restart; `state/references` is ignore-key mode.
//! - `http`: the axum handlers (auth, send, lookup).
//! - `bucket`: the token bucket of the fake's own rate limit.
//! - `webhook`: signed, retried, bounded webhook delivery.
//!
//! Background work: one scheduler task fires status changes from a timer
//! heap (one log write per batch); one task per message with events to
//! deliver drains that message's queue in order; one sweeper forgets keys
//! past their retention. All of it stops on shutdown, and nothing is kept
//! that the log does not hold: a restart on the same log rebuilds keys,
//! first answers, messages, remaining status changes and undelivered events.
//!
//! # Tier modes
//! By default the fake offers the whole contract: a key that deduplicates
//! sends and a lookup by key (courier's tier `a`). Two settings of
//! [`FakeConfig`] take a part away, so that a run can prove what courier
//! promises against a lesser provider from this log:
//! - `ignore_key` (`--ignore-key`): no deduplication. Every valid send
//!   creates a new message (its own id, plan, webhooks and `created` line);
//!   a repeat is never replayed, `409` and `422` never happen. The key is
//!   the client's reference: a lookup answers the earliest-created message
//!   sent with it that is visible, each message `lookup_lag_ms` after its
//!   own creation. The time-out fault is drawn per send.
//! - `lookup` false (`--no-lookup`): every lookup is answered
//!   `501 {"error":"lookup_not_supported"}` and logged `faulted`.
//!
//! Tier `a-` is `--no-lookup`, `b` is `--ignore-key --lookup-lag-ms N`, `c`
//! is `--ignore-key --no-lookup` ([`config::TIERS`], `--tier`). The mode is
//! the process's: a restart is given the same flags, and a log written in
//! the other deduplication mode is refused, never misread.
//!
//! # Invariants
//! - Every request and every effect is one log line; `seq` runs from 1
//!   without gaps; a line is written (one `write(2)`) before its answer
//!   leaves or its effect becomes visible, so it survives a SIGKILL.
//! - Exactly one `created` line per key while the key is remembered: a
//!   repeat, a concurrent request, a restart or a lost answer never makes a
//!   second message (`state` claims the key before creating). Ignore-key
//!   mode drops this one on purpose: each send that is not lost before
//!   creating is one `created` line.
//! - Each message reaches exactly one final status, and its `status` lines
//!   appear in their true order; only webhook *delivery* order is perturbed.
//! - Fault and timing decisions depend on (seed, key), not on arrival order
//!   (in ignore-key mode on (seed, key, the send's number among the key's
//!   sends)); a message's plan is written in its `created` line and
//!   survives restarts.
//!
//! # Rate limit
//! With `rate_limit` (`--rate-limit N/s`, `--rate-burst B`) the fake meters
//! sends with a token bucket of its own, as a provider's gateway does: a
//! send that finds no token is answered `429 {"error":"rate_limited"}` with
//! `Retry-After` (whole seconds until a token is back), in each dialect's
//! own error shape, before it claims its key or draws its latency or fate.
//! It creates nothing and remembers nothing, so the same key sent again
//! later is handled as if the refused send had never come; it is logged
//! `rejected` with `fault: rate_limited`, never as a created message.
//! Lookups and webhooks are not metered. The bucket starts full at every
//! start of the provider: it is not kept in the log.
//!
//! Test controls beside the seeded faults: what a send's latency is drawn
//! from ([`LatencySubject`]), the per-request draw, the message's own, or a
//! latency the message body states (`[latency N ms]`), which lets any
//! client make one chosen message slow.
//!
//! Named tests: `tests/contract.rs` (every row of the contract's tables, bad
//! input leaves no effect), `tests/contract_faults.rs` (fault rates within a
//! binomial tolerance, webhook signatures and retries),
//! `tests/contract_restart.rs` (replays, lookups and webhooks survive a
//! restart; torn lines; seq continues), `tests/tier_modes.rs` (ignore-key
//! and no-lookup: duplicates, per-message lag, `501`, recovery of several
//! messages per key, a log of the other mode refused), `tests/rate_limit.rs`
//! (a burst over the limit is `429` with `Retry-After` in every dialect and
//! creates nothing, the key succeeds later, lookups are not metered, seeded
//! fates unchanged). Its benchmark is
//! `courier bench provider` (`courier-bench`, `provider.rs`).

mod bucket;
pub mod config;
pub mod dialect;
mod fate;
mod http;
mod logfile;
mod state;
mod webhook;

pub use config::{
    FakeConfig, FaultRates, Latency, LatencySubject, MsRange, SendRate, TierModes, TIERS,
};
pub use logfile::LogOpened;
pub use state::RecoverySummary;

use bucket::{Admission, SendBucket};
use chrono::Utc;
use logfile::LogOpenError;
use state::State;
use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Why the fake provider could not start or stopped. Every variant but
/// `Serve` is fixed by the operator (settings, the log file); `Serve` is an
/// I/O failure of the listening socket.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    #[error("invalid provider settings: {0}")]
    Config(String),
    #[error("cannot open the log {path}: {source}")]
    LogOpen {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the log {path} is damaged at line {line}: {reason}")]
    LogCorrupt {
        path: std::path::PathBuf,
        line: u64,
        reason: String,
    },
    #[error("cannot build the webhook client: {0}")]
    Client(String),
    #[error("cannot listen: {0}")]
    Bind(std::io::Error),
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
    #[error("the provider task failed: {0}")]
    Task(String),
}

impl From<LogOpenError> for FakeError {
    fn from(e: LogOpenError) -> Self {
        match e {
            LogOpenError::Io { path, source } => FakeError::LogOpen { path, source },
            LogOpenError::Corrupt { path, line, reason } => {
                FakeError::LogCorrupt { path, line, reason }
            }
        }
    }
}

/// What the handlers and background tasks share.
pub(crate) struct Shared {
    pub cfg: FakeConfig,
    /// Keys, messages, timers and the log writer. A std mutex: it is never
    /// held across an await, and every critical section is short (a map
    /// operation and at most one `write(2)`), so an async mutex would only
    /// add cost.
    pub state: Mutex<State>,
    /// Set on shutdown; every wait in the provider selects on it.
    pub cancel: CancellationToken,
    /// Every spawned task, so shutdown can wait until none can write.
    pub tracker: TaskTracker,
    /// Wakes the scheduler when an earlier timer is queued.
    pub timer_wake: Notify,
    /// Bounds webhook POSTs in flight.
    pub webhook_permits: Semaphore,
    pub webhook_http: reqwest::Client,
    /// Tells apart the latency draws of requests with the same key.
    pub requests: AtomicU64,
    /// The last `seq` written.
    pub log_lines: Arc<AtomicU64>,
    /// The rate limit's bucket (`None`: no limit). A mutex of its own, not
    /// the state's: metering a send takes no log write, and a send that is
    /// admitted takes the state lock afterwards.
    pub send_bucket: Option<Mutex<SendBucket>>,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; the state is still the
        // last consistent one the log describes, so keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the rate limit about one send, now; admitted when there is none.
    pub fn admit_send(&self) -> Admission {
        let Some(bucket) = &self.send_bucket else {
            return Admission::Admitted;
        };
        // Its arithmetic saturates and cannot panic; a poisoned lock still
        // holds counts that make a valid bucket, so keep metering.
        let mut bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
        // Read under the lock, so the bucket sees its times in order.
        bucket.admit(Instant::now())
    }
}

/// A provider whose log has been read back, ready to serve.
pub struct FakeProvider {
    shared: Arc<Shared>,
    recovered: RecoverySummary,
    starts: Vec<u64>,
}

impl FakeProvider {
    /// Validates the settings and opens (or recovers) the log.
    pub async fn open(cfg: FakeConfig) -> Result<Self, FakeError> {
        cfg.validate().map_err(FakeError::Config)?;
        let webhook_http = reqwest::Client::builder()
            .timeout(Duration::from_millis(cfg.webhook_timeout_ms))
            .connect_timeout(Duration::from_millis(cfg.webhook_timeout_ms))
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| FakeError::Client(e.to_string()))?;
        let recover_cfg = cfg.clone();
        let (state, recovered, starts) = tokio::task::spawn_blocking(move || {
            State::recover(&recover_cfg, Instant::now(), Utc::now())
        })
        .await
        .map_err(|e| FakeError::Task(e.to_string()))??;
        let log_lines = state.log.written();
        let send_bucket = cfg
            .send_limit()
            .map(|(rate, burst)| Mutex::new(SendBucket::new(rate, burst, Instant::now())));
        let shared = Shared {
            webhook_permits: Semaphore::new(cfg.webhook_concurrency_max),
            cfg,
            state: Mutex::new(state),
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
            timer_wake: Notify::new(),
            webhook_http,
            requests: AtomicU64::new(0),
            log_lines,
            send_bucket,
        };
        Ok(FakeProvider {
            shared: Arc::new(shared),
            recovered,
            starts,
        })
    }

    /// What was read back from an existing log.
    pub fn recovered(&self) -> &RecoverySummary {
        &self.recovered
    }

    /// The counter of log lines written (the last `seq`).
    pub fn log_lines(&self) -> Arc<AtomicU64> {
        self.shared.log_lines.clone()
    }

    /// Serves until `shutdown` resolves, then stops every background task
    /// and waits until none of them can write to the log any more.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), FakeError> {
        use axum::serve::ListenerExt;
        let sh = self.shared;
        sh.tracker.spawn(scheduler(sh.clone()));
        sh.tracker.spawn(sweeper(sh.clone()));
        for n in self.starts {
            webhook::start(&sh, n);
        }
        let cancel = sh.cancel.clone();
        let listener = listener.tap_io(|tcp| {
            // Best effort: a socket that refuses it still works, only slower.
            let _ = tcp.set_nodelay(true);
        });
        let server = axum::serve(listener, http::router(sh.clone()))
            .with_graceful_shutdown(async move {
                tokio::select! {
                    () = shutdown => {}
                    () = cancel.cancelled() => {}
                }
                // Held and delayed requests end now instead of at their timer.
                cancel.cancel();
            })
            .into_future();
        // A connection that never finishes its request cannot hold the stop
        // up for more than the grace period.
        let grace = async {
            sh.cancel.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        let result = tokio::select! {
            r = server => r,
            () = grace => Ok(()),
        };
        sh.cancel.cancel();
        sh.tracker.close();
        sh.tracker.wait().await;
        // Whatever might still run (a connection dropped after the grace
        // period) can no longer write: the log ends here.
        sh.lock().log.close();
        result.map_err(FakeError::Serve)
    }
}

/// Opens the log and serves on `listener` until `shutdown` resolves.
pub async fn serve(
    cfg: FakeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), FakeError> {
    FakeProvider::open(cfg)
        .await?
        .serve(listener, shutdown)
        .await
}

/// A provider running in this process (for tests and the bench).
pub struct FakeHandle {
    pub addr: SocketAddr,
    pub recovered: RecoverySummary,
    log_lines: Arc<AtomicU64>,
    tracker: TaskTracker,
    stop: CancellationToken,
    join: tokio::task::JoinHandle<Result<(), FakeError>>,
}

impl FakeHandle {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Log lines written so far (the last `seq`).
    pub fn log_lines(&self) -> u64 {
        self.log_lines.load(Ordering::Acquire)
    }

    /// Work in flight besides the permanent scheduler and sweeper: webhook
    /// deliveries and delayed first sends. Zero when the provider is quiet
    /// (with no status change pending, nothing more will happen by itself).
    pub fn tasks_in_flight(&self) -> usize {
        self.tracker.len().saturating_sub(PERMANENT_TASKS)
    }

    /// Stops the provider and waits until it has stopped writing its log.
    pub async fn shutdown(self) -> Result<(), FakeError> {
        self.stop.cancel();
        self.join().await
    }

    /// Waits for the provider to stop on its own.
    pub async fn join(self) -> Result<(), FakeError> {
        self.join
            .await
            .map_err(|e| FakeError::Task(e.to_string()))?
    }
}

/// Opens the log and serves on a fresh loopback port in a spawned task.
pub async fn start(cfg: FakeConfig) -> Result<FakeHandle, FakeError> {
    let provider = FakeProvider::open(cfg).await?;
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(FakeError::Bind)?;
    let addr = listener.local_addr().map_err(FakeError::Bind)?;
    let stop = CancellationToken::new();
    let log_lines = provider.log_lines();
    let tracker = provider.shared.tracker.clone();
    let recovered = provider.recovered().clone();
    let signal = stop.clone();
    let join = tokio::spawn(provider.serve(listener, async move { signal.cancelled().await }));
    Ok(FakeHandle {
        addr,
        recovered,
        log_lines,
        tracker,
        stop,
        join,
    })
}

/// How long a stop waits for open requests before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The scheduler and the sweeper.
const PERMANENT_TASKS: usize = 2;

/// Fires status changes as their timers come due.
async fn scheduler(sh: Arc<Shared>) {
    loop {
        let (starts, next) = {
            let mut st = sh.lock();
            if st.log.is_poisoned() {
                return;
            }
            let starts = match st.fire_due(Instant::now()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("status changes stopped: {e}");
                    return;
                }
            };
            let next = st.next_due();
            st.timer_wake_at = next;
            (starts, next)
        };
        for n in starts {
            webhook::start(&sh, n);
        }
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sh.cancel.cancelled() => return,
            () = sh.timer_wake.notified() => {}
            () = sleep => {}
        }
    }
}

/// Forgets keys past their retention, a few times per retention period.
async fn sweeper(sh: Arc<Shared>) {
    let every = Duration::from_millis((sh.cfg.key_retention_ms / 4).clamp(50, 60_000));
    loop {
        tokio::select! {
            () = sh.cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        sh.lock().sweep(Instant::now());
    }
}
