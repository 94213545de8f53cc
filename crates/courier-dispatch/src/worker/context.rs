//! What the worker's loops share: the store, the provider, the limits, the
//! leases in hand, the counters and the settle batcher.
//!
//! # Invariants
//! - An action is in `held` exactly while a delivery works on it; the
//!   heartbeat renews only what is in `held`.
//! - Every store call of the worker (claims, heartbeats, the steps of a
//!   delivery, a batch of settles) is given up after one lease time
//!   ([`bounded`]): a primary that stopped answering without closing its
//!   connections (frozen, or cut off) cannot hold the worker; the call's
//!   outcome is then unknown, as after a lost commit answer, and its retry
//!   re-checks it on whichever node the pool reaches next.
//! - The local deadline of a held lease only moves later
//!   (`courier_core::lease::renewed_deadline_ms`).

use super::event::Event;
use super::{Provider, WorkerConfig, WorkerStats};
use crate::group_commit::GroupCommit;
use courier_core::backoff::store_retry_delay_ms;
use courier_core::lease::{renewed_deadline_ms, LocalLease};
use courier_store::{PgStore, SettleOutcome, SettleReq, StoreError};
use rand::rngs::StdRng;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One held lease, shared by its delivery and the heartbeat.
pub(super) struct Held {
    pub epoch: i64,
    /// Lease end as this process measured it, in ms since `Ctx::t0`.
    pub deadline_ms: AtomicU64,
    /// The action's `expires_at` on the same clock, measured from the
    /// claim's send like the lease (`courier_core::lease::expires_ms`).
    pub expires_ms: Option<u64>,
    /// Cancelled by the heartbeat when another worker holds the action.
    pub fenced: CancellationToken,
}

impl Held {
    pub fn new(epoch: i64, deadline_ms: u64, expires_ms: Option<u64>) -> Self {
        debug_assert!(epoch > 0, "a lease held at epoch {epoch}");
        Held {
            epoch,
            deadline_ms: AtomicU64::new(deadline_ms),
            expires_ms,
            fenced: CancellationToken::new(),
        }
    }

    /// Moves the local deadline after a renewal sent at `sent_ms` was answered "held".
    pub fn renewed(&self, sent_ms: u64, lease_ttl_ms: u64) {
        // The closure always returns Some, so the update cannot fail.
        let _ = self
            .deadline_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
                Some(renewed_deadline_ms(cur, sent_ms, lease_ttl_ms))
            });
    }
}

/// Settles of one worker's deliveries, committed together.
pub(super) type Settles = GroupCommit<SettleReq, Result<SettleOutcome, StoreError>>;

pub(super) struct Ctx<P> {
    pub store: PgStore,
    pub client: P,
    pub cfg: WorkerConfig,
    pub owner: Arc<str>,
    /// The origin of this process's lease clock (`tokio::time`, which a test
    /// could pause; none does).
    t0: Instant,
    pub held: Mutex<HashMap<i64, Arc<Held>>>,
    pub stats: WorkerStats,
    pub settles: Settles,
    /// The provider's pause as this worker knows it.
    pub gate: super::gate::Gate,
    #[cfg(feature = "failpoints")]
    pub failpoints: crate::failpoint::Failpoints,
    /// The negative control: deadlines are ignored
    /// (`Worker::with_unsafe_ignore_expiry`); always false otherwise.
    pub ignore_expiry: bool,
}

impl<P: Provider> Ctx<P> {
    /// Must be called within a tokio runtime: it starts the settle batcher.
    pub fn new(store: PgStore, client: P, cfg: WorkerConfig) -> Self {
        let owner: Arc<str> = Arc::from(cfg.owner.as_str());
        let settles = {
            let store = store.clone();
            let overdue = cfg.limits.final_overdue_ms;
            let ttl_ms = cfg.limits.lease_ttl_ms;
            // Two batches at once, so one commits while the next fills.
            GroupCommit::start(
                cfg.limits.worker_concurrency_max as usize,
                2,
                move |reqs: Vec<SettleReq>| {
                    let store = store.clone();
                    async move { bounded(ttl_ms, store.actions_settle(&reqs, overdue)).await }
                },
            )
        };
        let gate = super::gate::Gate::new(cfg.provider_gate.as_deref().map(Arc::from));
        Ctx {
            store,
            client,
            gate,
            cfg,
            owner,
            t0: Instant::now(),
            held: Mutex::new(HashMap::new()),
            stats: WorkerStats::default(),
            settles,
            #[cfg(feature = "failpoints")]
            failpoints: crate::failpoint::Failpoints::default(),
            ignore_expiry: false,
        }
    }
}

impl<P> Ctx<P> {
    /// This process's lease clock, in ms.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn local_lease(&self, held: &Held) -> LocalLease {
        LocalLease {
            now_ms: self.now_ms(),
            deadline_ms: held.deadline_ms.load(Ordering::Relaxed),
            expires_ms: held.expires_ms,
        }
    }

    /// Runs a store call until it answers, pausing while the database is away.
    /// Returns None when the action was fenced meanwhile (by the heartbeat).
    pub async fn with_retry<T, F, Fut>(
        &self,
        fenced: &CancellationToken,
        rng: &mut StdRng,
        mut op: F,
    ) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut retry = 0;
        loop {
            if fenced.is_cancelled() {
                return None;
            }
            match bounded(self.cfg.limits.lease_ttl_ms, op()).await {
                Ok(v) => return Some(v),
                Err(e) => {
                    self.observe(Event::StoreRetry { error: &e }).await;
                    let wait = store_retry_delay_ms(retry, rng);
                    retry += 1;
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
            }
        }
    }
}

/// A store call given up after `limit_ms` (the lease time): its outcome is
/// then unknown, [`StoreError::Unavailable`], and the caller pauses and
/// retries it, which every write of the worker allows (a retried write
/// recognises its own earlier success, or is fenced).
pub(super) async fn bounded<T>(
    limit_ms: u64,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(Duration::from_millis(limit_ms), call).await {
        Ok(answer) => answer,
        Err(_) => Err(StoreError::Unavailable(format!(
            "no answer from the database within {limit_ms} ms (the lease time)"
        ))),
    }
}
