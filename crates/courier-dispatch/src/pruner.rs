//! The pruner: retention, the fold of the maintained counts and the trim of
//! the recent acceptances the dashboard walks (`outbox_accepts`). It is one
//! of a worker's loops: [`crate::worker::Worker::run`] runs it beside the
//! others when the worker's config has a [`PrunerConfig`] (what `courier
//! worker` and the adapter give it; `courier worker --no-prune` leaves the
//! fold and the trim, and the benchmarks, which measure the protocol
//! without maintenance, give none).
//!
//! Why the worker and not the server: workers are what finish actions, so a
//! deployment that makes history runs them; there are usually several, so
//! the pruning goes on while any one of them lives (a SIGKILLed worker's
//! batch is rolled back with its connection); and the server's latency
//! stays free of it. Several workers do not fight: every batch tries the
//! pruner's advisory lock (`courier_store::PRUNE_LOCK_ID`) and a worker that
//! does not get it skips its turn. `courier db prune` runs the same batches
//! by hand.
//!
//! # Invariants
//! - What is never removed is the store's to guarantee
//!   (`courier_store::prune`); this loop only paces the batches: a full
//!   batch is followed at once by the next, anything less waits
//!   `interval_ms`.

use courier_core::{Limits, Retention};
use courier_store::{PgStore, PruneWindows, Pruned, ACCEPTS_KEEP_S};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the pruner does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunerConfig {
    /// The windows, or `None` to fold the counts only (`--no-prune`).
    pub windows: Option<PruneWindows>,
    /// The pause after a round that left nothing more to do.
    pub interval_ms: u64,
}

impl PrunerConfig {
    /// What `courier worker` runs: pruning to `retention` (validated
    /// against `limits`), the fold and the trim.
    pub fn new(retention: &Retention, limits: &Limits) -> Self {
        PrunerConfig {
            windows: Some(PruneWindows::new(retention, limits)),
            interval_ms: retention.prune_interval_ms,
        }
    }

    /// The fold and the trim only, no retention (`courier worker --no-prune`).
    pub fn fold_only(retention: &Retention) -> Self {
        PrunerConfig {
            windows: None,
            interval_ms: retention.prune_interval_ms,
        }
    }
}

/// Rounds until `shutdown`: prune while batches come back full, fold, wait.
pub(crate) async fn run(store: PgStore, cfg: PrunerConfig, shutdown: CancellationToken) {
    loop {
        if let Some(w) = &cfg.windows {
            let pruned = prune_until_done(&store, w, &shutdown).await;
            if pruned != Pruned::default() {
                tracing::debug!(?pruned, "pruner: removed");
            }
        }
        match store.counts_fold().await {
            Ok(Some(n)) => metrics::counter!("courier_count_deltas_folded_total").increment(n),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "pruner: cannot fold the counts"),
        }
        accepts_trim(&store, &shutdown).await;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(cfg.interval_ms)) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Acceptances the fold trims per statement, and statements per round at
/// most (a round then trims up to 1,000,000: 200 s of 5,000/s).
const ACCEPTS_TRIM_ROWS: u32 = 10_000;
const ACCEPTS_TRIM_BATCHES_MAX: u32 = 100;

/// Trims `outbox_accepts` to the window the dashboard's walk reads, in
/// batches until one comes back short.
async fn accepts_trim(store: &PgStore, shutdown: &CancellationToken) {
    for _ in 0..ACCEPTS_TRIM_BATCHES_MAX {
        if shutdown.is_cancelled() {
            return;
        }
        match store.accepts_trim(ACCEPTS_TRIM_ROWS, ACCEPTS_KEEP_S).await {
            Ok(Some(n)) => {
                metrics::counter!("courier_accepts_trimmed_total").increment(n);
                if n < u64::from(ACCEPTS_TRIM_ROWS) {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "pruner: cannot trim the acceptances");
                return;
            }
        }
    }
}

/// Batches until one comes back short, another process holds the lock, the
/// database fails, or `shutdown`; answers what they removed.
async fn prune_until_done(
    store: &PgStore,
    w: &PruneWindows,
    shutdown: &CancellationToken,
) -> Pruned {
    let mut total = Pruned::default();
    while !shutdown.is_cancelled() {
        match store.prune_batch(w).await {
            Ok(Some(p)) => {
                for (table, n) in [
                    ("actions", p.actions),
                    ("outbox", p.outbox),
                    ("webhook_events", p.webhook_events),
                    ("events", p.events),
                ] {
                    metrics::counter!("courier_pruned_rows_total", "table" => table).increment(n);
                }
                total.add(p);
                if !p.full(w) {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "pruner: a batch failed");
                break;
            }
        }
    }
    total
}
