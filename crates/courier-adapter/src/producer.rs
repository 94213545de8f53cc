//! The producer: inserts jobs through courier's public enqueue path
//! (the set form, `courier_store::actions_enqueue_many`: one statement and
//! one transaction per batch of at most `PRODUCER_BATCH_MAX` jobs), paced by a
//! fixed rate on real elapsed time, by the harness's `ENQUEUE <n>` tokens,
//! or by a target depth.
//!
//! # Invariants
//! - A job counts as enqueued only after its batch's commit returned.
//! - Jobs owed but not inserted (the insert failed) are offered again.

use crate::config::{Config, Pacing, ProducerMode};
use crate::job;
use crate::pacing::{batches, depth_target_batch, Credit};
use courier_store::{EnqueueError, NewAction, PgStore};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The queue's depth as last counted, and the jobs enqueued when that
/// count started: depth-target mode adds the jobs enqueued since.
#[derive(Debug, Default)]
pub struct Depth {
    counted: Mutex<(u64, u64)>,
}

impl Depth {
    pub fn set(&self, depth: u64, enqueued_before: u64) {
        *self.counted.lock().unwrap_or_else(|p| p.into_inner()) = (depth, enqueued_before);
    }

    /// The last count.
    pub fn last(&self) -> u64 {
        self.counted.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The last count plus the jobs enqueued since it started.
    pub fn estimate(&self, enqueued_now: u64) -> u64 {
        let (depth, before) = *self.counted.lock().unwrap_or_else(|p| p.into_inner());
        depth + enqueued_now.saturating_sub(before)
    }
}

pub struct Producer {
    pub store: PgStore,
    pub cfg: Arc<Config>,
    pub enqueued: Arc<AtomicU64>,
    pub depth: Arc<Depth>,
    /// Insert failures so far (logged sparingly).
    failures: AtomicU64,
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
        }
    }

    /// Runs until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        match (self.cfg.mode, self.cfg.pacing) {
            (ProducerMode::DepthTarget, _) => self.depth_target(&shutdown).await,
            (ProducerMode::Fixed, Pacing::Harness) => {
                if self.harness_paced(stdin_tokens(), &shutdown).await {
                    tracing::warn!("stdin ended: pacing on the adapter's own clock from now on");
                    self.fixed_rate(&shutdown).await;
                }
            }
            (ProducerMode::Fixed, Pacing::Adapter) => self.fixed_rate(&shutdown).await,
        }
    }

    /// `PRODUCER_RATE` jobs a second, credited on real elapsed time.
    async fn fixed_rate(&self, shutdown: &CancellationToken) {
        let period = Duration::from_millis(self.cfg.producer_batch_ms);
        let mut credit = Credit::new(self.cfg.producer_rate_per_s, Instant::now().into_std());
        let mut next = Instant::now();
        loop {
            next = (next + period).max(Instant::now());
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = shutdown.cancelled() => return,
            }
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
            match enqueue_batch(&self.store, size, self.cfg.job_payload_bytes).await {
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
}

/// One statement of `n` jobs through the set form
/// (`courier_store::actions_enqueue_many`, `courier.enqueue_many`): all
/// or nothing, its own transaction.
async fn enqueue_batch(
    store: &PgStore,
    n: usize,
    payload_bytes: usize,
) -> Result<(), EnqueueError> {
    let new = NewAction {
        store: job::STORE.into(),
        to: job::RECIPIENT.into(),
        body: job::body(crate::emit::now_since_epoch(), payload_bytes),
        key: None,
    };
    store.actions_enqueue_many(&vec![new; n]).await?;
    Ok(())
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
