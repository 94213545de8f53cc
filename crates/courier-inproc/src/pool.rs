//! [`WorkerPool`]: `n` in-process workers sharing one provider (or one
//! each), each with its own connection pool, like `n` worker processes.

use courier_dispatch::worker::{Provider, Worker, WorkerConfig};
use courier_store::{PgStore, StoreConfig, StoreError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// Workers running in this process until [`WorkerPool::stop`].
pub struct WorkerPool<P> {
    workers: Vec<Arc<Worker<P>>>,
    tasks: JoinSet<()>,
    shutdown: CancellationToken,
}

impl<P: Provider + Send + Sync + 'static> WorkerPool<P> {
    /// Starts `n` workers. Worker `i` connects with `store` (its own pool),
    /// talks to `provider(i)` and runs with `worker`, but owned as
    /// `{owner}-w{i}`, seeded with `seed + i`, and reconciling only if it is
    /// the first and `worker.reconcile` asks for it.
    pub async fn start(
        n: u32,
        store: &StoreConfig,
        mut provider: impl FnMut(u32) -> P,
        worker: &WorkerConfig,
    ) -> Result<Self, StoreError> {
        let shutdown = CancellationToken::new();
        let mut workers = Vec::new();
        let mut tasks = JoinSet::new();
        for i in 0..n {
            let cfg = WorkerConfig {
                owner: format!("{}-w{i}", worker.owner),
                seed: worker.seed.wrapping_add(u64::from(i)),
                reconcile: worker.reconcile && i == 0,
                ..worker.clone()
            };
            let w = Arc::new(Worker::new(
                PgStore::connect(store).await?,
                provider(i),
                cfg,
            ));
            workers.push(w.clone());
            let token = shutdown.clone();
            tasks.spawn(async move { w.run(token).await });
        }
        Ok(WorkerPool {
            workers,
            tasks,
            shutdown,
        })
    }

    /// The workers, for their counters.
    pub fn workers(&self) -> &[Arc<Worker<P>>] {
        &self.workers
    }

    /// Actions settled by every worker so far.
    pub fn settled(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.stats().settled.load(Ordering::Relaxed))
            .sum()
    }

    /// Stops every worker and waits until each has let its actions in hand
    /// finish; the first worker task that panicked is the error. The
    /// counters stay readable; dropping the pool closes its connections.
    pub async fn stop(&mut self) -> Result<(), JoinError> {
        self.shutdown.cancel();
        let mut first = Ok(());
        while let Some(r) = self.tasks.join_next().await {
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}
