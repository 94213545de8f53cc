//! Group commit: many callers' writes in one transaction.
//!
//! [`GroupCommit`] collects requests from concurrent tasks and runs them as
//! one batch; each caller gets its own answer after the batch committed. It
//! lives in the runtime that uses it, as River's `BatchCompleter` lives in
//! its job completer, not in its driver: the store has only batch writes
//! (`PgStore::actions_settle`, `PgStore::webhooks_merge`), and the worker's
//! settles and the webhook API's merges are batched here.
//!
//! # Invariants
//! - A caller is answered only after the transaction holding its write
//!   committed (or with the error that ended it): an answer never runs ahead
//!   of the database.
//! - A batch answers every request, in order, exactly once.
//! - Batches of one batcher may overlap (`parallel`); the store's locking
//!   invariant (courier-store's crate docs) is what keeps overlapping
//!   batches from waiting on each other in a cycle.

use courier_store::StoreError;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};

type Job<Req, Resp> = (Req, oneshot::Sender<Result<Resp, StoreError>>);

/// A batcher of writes. Requests that arrive while a batch is running form
/// the next one, so batches grow with load and a lone request waits for no
/// one. At most `parallel` batches run at once (their commits overlap).
pub struct GroupCommit<Req, Resp> {
    tx: mpsc::Sender<Job<Req, Resp>>,
}

impl<Req, Resp> Clone for GroupCommit<Req, Resp> {
    fn clone(&self) -> Self {
        GroupCommit {
            tx: self.tx.clone(),
        }
    }
}

impl<Req: Send + 'static, Resp: Send + 'static> GroupCommit<Req, Resp> {
    /// Starts the batcher on the current tokio runtime. `run` must answer
    /// every request of its batch, in order. The batcher stops when the last
    /// handle is dropped.
    pub fn start<F, Fut>(batch_max: usize, parallel: usize, run: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Resp>, StoreError>> + Send + 'static,
    {
        let batch_max = batch_max.max(1);
        let parallel = parallel.max(1);
        let (tx, mut rx) = mpsc::channel::<Job<Req, Resp>>(batch_max * parallel * 2);
        let run = Arc::new(run);
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(parallel));
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let Some(first) = rx.recv().await else {
                    return;
                };
                let mut jobs = vec![first];
                while jobs.len() < batch_max {
                    match rx.try_recv() {
                        Ok(job) => jobs.push(job),
                        Err(_) => break,
                    }
                }
                let run = run.clone();
                tokio::spawn(async move {
                    let (reqs, replies): (Vec<Req>, Vec<_>) = jobs.into_iter().unzip();
                    let n = reqs.len();
                    match run(reqs).await {
                        Ok(resps) => {
                            let got = resps.len();
                            let mut resps = resps.into_iter();
                            for reply in replies {
                                let answer = resps.next().ok_or_else(|| {
                                    StoreError::Query(format!(
                                        "a batch of {n} answered {got} requests"
                                    ))
                                });
                                let _ = reply.send(answer);
                            }
                        }
                        Err(e) => {
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                    }
                    drop(slot);
                });
            }
        });
        GroupCommit { tx }
    }

    /// Adds `req` to the next batch and waits until that batch committed.
    pub async fn call(&self, req: Req) -> Result<Resp, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((req, reply))
            .await
            .map_err(|_| StoreError::Unavailable("the batcher has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the batch ended without an answer".into()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    #[tokio::test]
    async fn group_commit_answers_every_caller_in_batches() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let s2 = sizes.clone();
        let gc: GroupCommit<u32, u32> = GroupCommit::start(16, 2, move |reqs: Vec<u32>| {
            s2.lock().unwrap().push(reqs.len());
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(reqs.into_iter().map(|r| r * 10).collect())
            }
        });
        let mut tasks = Vec::new();
        for i in 0..100u32 {
            let gc = gc.clone();
            tasks.push(tokio::spawn(async move { (i, gc.call(i).await.unwrap()) }));
        }
        for t in tasks {
            let (i, answer) = t.await.unwrap();
            assert_eq!(answer, i * 10);
        }
        let sizes = sizes.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 100);
        assert!(sizes.iter().all(|&n| n <= 16));
        assert!(
            sizes.len() < 100,
            "callers waiting together share a batch: {sizes:?}"
        );
    }

    #[tokio::test]
    async fn group_commit_passes_errors_and_short_answers_to_each_caller() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c2 = calls.clone();
        let gc: GroupCommit<u32, u32> = GroupCommit::start(8, 1, move |reqs: Vec<u32>| {
            let n = c2.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    Err(StoreError::Unavailable("restarting".into()))
                } else {
                    // Answers one fewer than asked.
                    Ok(reqs.iter().skip(1).copied().collect())
                }
            }
        });
        assert!(matches!(gc.call(1).await, Err(StoreError::Unavailable(_))));
        assert!(matches!(gc.call(2).await, Err(StoreError::Query(_))));
    }
}
