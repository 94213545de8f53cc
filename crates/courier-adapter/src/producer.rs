//! The producer: inserts jobs through courier's public enqueue path
//! (the set form, `courier_store::actions_enqueue_many`: one statement and
//! one transaction per batch of at most `PRODUCER_BATCH_MAX` jobs), paced by a
//! fixed rate on real elapsed time, by the harness's `ENQUEUE <n>` tokens,
//! or by a target depth.
//!
//! The fixed rate is `PRODUCER_RATE` until `PRODUCER_RATE_CONTROL_FILE`
//! says otherwise: the file is read at start and every [`CONTROL_READ_EVERY`],
//! and a decimal in it becomes the rate from then on (the harness's
//! high-load phases write `base x 1.5` there, and the base again after).
//!
//! # Invariants
//! - A job counts as enqueued only after its batch's commit returned.
//! - Jobs owed but not inserted (the insert failed) are offered again.
//! - An unreadable or half-written control file leaves the rate as it was.

use crate::config::{Config, Pacing, ProducerMode};
use crate::job;
use crate::pacing::{batches, depth_target_batch, parse_rate, Credit};
use courier_store::{EnqueueError, NewAction, PgStore};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the rate control file is read.
pub const CONTROL_READ_EVERY: Duration = Duration::from_millis(250);
/// How long, after stdin ends under harness pacing, the producer waits for
/// the SIGTERM that the harness sends right after closing it (its
/// `ReplicaPool._signal_slot` closes stdin, then signals) before it paces
/// on its own clock and says so.
const STDIN_END_GRACE: Duration = Duration::from_secs(2);

/// The queue's depth as last counted, and the jobs enqueued when that
/// count started: depth-target mode adds the jobs enqueued since.
#[derive(Debug, Default)]
pub struct Depth {
    counted: Mutex<Counted>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    depth: u64,
    enqueued_before: u64,
    /// Whether the latest count succeeded (false before the first and
    /// after a failed one).
    current: bool,
}

impl Depth {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counted> {
        self.counted.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set(&self, depth: u64, enqueued_before: u64) {
        *self.lock() = Counted {
            depth,
            enqueued_before,
            current: true,
        };
    }

    /// The latest count failed: the depth is not known.
    pub fn unknown(&self) {
        self.lock().current = false;
    }

    /// The depth, when the latest count succeeded.
    pub fn current(&self) -> Option<u64> {
        let c = *self.lock();
        c.current.then_some(c.depth)
    }

    /// The last successful count plus the jobs enqueued since it started.
    pub fn estimate(&self, enqueued_now: u64) -> u64 {
        let c = *self.lock();
        c.depth + enqueued_now.saturating_sub(c.enqueued_before)
    }
}

pub struct Producer {
    pub store: PgStore,
    pub cfg: Arc<Config>,
    pub enqueued: Arc<AtomicU64>,
    pub depth: Arc<Depth>,
    /// Insert failures so far (logged sparingly).
    failures: AtomicU64,
    /// Jobs offered so far: their sequence numbers (the store and the fail
    /// mark follow from it).
    seq: AtomicU64,
}

impl Producer {
    pub fn new(
        store: PgStore,
        cfg: Arc<Config>,
        enqueued: Arc<AtomicU64>,
        depth: Arc<Depth>,
    ) -> Self {
        Producer {
            store,
            cfg,
            enqueued,
            depth,
            failures: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    /// Runs until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        match (self.cfg.mode, self.cfg.pacing) {
            (ProducerMode::DepthTarget, _) => self.depth_target(&shutdown).await,
            (ProducerMode::Fixed, Pacing::Harness) => {
                if self.harness_paced(stdin_tokens(), &shutdown).await {
                    // The harness closes stdin just before its SIGTERM.
                    tokio::select! {
                        _ = tokio::time::sleep(STDIN_END_GRACE) => {}
                        _ = shutdown.cancelled() => return,
                    }
                    tracing::warn!("stdin ended: pacing on the adapter's own clock from now on");
                    self.fixed_rate(&shutdown).await;
                }
            }
            (ProducerMode::Fixed, Pacing::Adapter) => self.fixed_rate(&shutdown).await,
        }
    }

    /// `PRODUCER_RATE` jobs a second (or the control file's rate),
    /// credited on real elapsed time.
    async fn fixed_rate(&self, shutdown: &CancellationToken) {
        let period = Duration::from_millis(self.cfg.producer_batch_ms);
        let mut credit = Credit::new(self.cfg.producer_rate_per_s, Instant::now().into_std());
        let mut control = Control::new(self.cfg.rate_control_file.clone());
        control.apply(&mut credit);
        let mut next = Instant::now();
        loop {
            next = (next + period).max(Instant::now());
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = shutdown.cancelled() => return,
            }
            control.apply(&mut credit);
            let owed = credit.owed(Instant::now().into_std());
            let inserted = self.insert(owed).await;
            credit.refund(owed - inserted);
        }
    }

    /// One insert of up to `n` jobs per token; returns true when stdin ended.
    async fn harness_paced(
        &self,
        mut tokens: mpsc::UnboundedReceiver<u64>,
        shutdown: &CancellationToken,
    ) -> bool {
        let mut owed = 0u64;
        loop {
            let n = tokio::select! {
                n = tokens.recv() => n,
                _ = shutdown.cancelled() => return false,
            };
            let Some(n) = n else { return true };
            owed += n;
            owed -= self.insert(owed).await;
        }
    }

    /// Keeps about `TARGET_DEPTH` jobs pending.
    async fn depth_target(&self, shutdown: &CancellationToken) {
        let pause = Duration::from_millis(self.cfg.producer_batch_ms);
        while !shutdown.is_cancelled() {
            let estimate = self.depth.estimate(self.enqueued.load(Ordering::Relaxed));
            let n =
                depth_target_batch(self.cfg.target_depth, estimate, self.cfg.producer_batch_max);
            if n == 0 || self.insert(n as u64).await < n as u64 {
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }

    /// Inserts `n` jobs in batches; returns how many were committed.
    async fn insert(&self, n: u64) -> u64 {
        let mut done = 0;
        for size in batches(n, self.cfg.producer_batch_max) {
            match self.enqueue_batch(size).await {
                Ok(()) => {
                    done += size as u64;
                    self.enqueued.fetch_add(size as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    let failures = self.failures.fetch_add(1, Ordering::Relaxed);
                    if failures.is_multiple_of(100) {
                        tracing::warn!(error = %e, failures = failures + 1, "enqueue failed; the jobs are offered again");
                    }
                    break;
                }
            }
        }
        done
    }

    /// One statement of `n` jobs through the set form
    /// (`courier_store::actions_enqueue_many`, `courier.enqueue_many`): all
    /// or nothing, its own transaction. A failed batch's sequence numbers
    /// are used up (the numbers only spread stores and marks).
    async fn enqueue_batch(&self, n: usize) -> Result<(), EnqueueError> {
        let first = self.seq.fetch_add(n as u64, Ordering::Relaxed);
        let at = crate::emit::now_since_epoch();
        let news: Vec<NewAction> = (first..first + n as u64)
            .map(|seq| NewAction {
                store: job::store(seq, self.cfg.queue_count),
                to: job::RECIPIENT.into(),
                body: job::body(at, self.cfg.fail.marks(seq), self.cfg.job_payload_bytes),
                key: None,
                ..Default::default()
            })
            .collect();
        self.store.actions_enqueue_many(&news).await?;
        Ok(())
    }
}

/// The rate control file and when it was last read.
struct Control {
    path: Option<std::path::PathBuf>,
    next_read: Instant,
    /// Whether a failed read was logged (once per run of failures).
    complained: bool,
}

impl Control {
    fn new(path: Option<std::path::PathBuf>) -> Self {
        Control {
            path,
            next_read: Instant::now(),
            complained: false,
        }
    }

    /// Reads the file when due and sets its rate, if it holds one.
    fn apply(&mut self, credit: &mut Credit) {
        let Some(path) = &self.path else { return };
        let now = Instant::now();
        if now < self.next_read {
            return;
        }
        self.next_read = now + CONTROL_READ_EVERY;
        match std::fs::read_to_string(path).map(|t| parse_rate(&t)) {
            Ok(Some(rate)) => {
                self.complained = false;
                if rate != credit.rate_per_s() {
                    tracing::info!(rate, "producer rate from the control file");
                    credit.set_rate(rate, now.into_std());
                }
            }
            // Empty for a moment while the harness rewrites it, or not a rate.
            Ok(None) => {}
            Err(e) if !self.complained => {
                self.complained = true;
                tracing::warn!(path = %path.display(), error = %e, "rate control file unreadable; keeping the rate");
            }
            Err(_) => {}
        }
    }
}

/// The harness's `ENQUEUE <n>` lines from stdin, read on a thread of
/// their own (not the runtime's blocking pool, which would hold the
/// process open at exit); the channel closes when stdin ends.
fn stdin_tokens() -> mpsc::UnboundedReceiver<u64> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            let n = line
                .trim()
                .strip_prefix("ENQUEUE ")
                .and_then(|n| n.trim().parse::<u64>().ok());
            if let Some(n) = n.filter(|n| *n > 0) {
                if tx.send(n).is_err() {
                    return;
                }
            }
        }
    });
    rx
}
