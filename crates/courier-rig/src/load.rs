//! The actions a run enqueues, through the API with the typed client
//! (`courier_client`): action `i` is `order-i` for `+1555` followed by `i`
//! in seven digits.

use crate::RigError;
use courier_client::{Client, EnqueueRequest};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::time::{Duration, Instant};

/// Requests in flight at once.
pub const ENQUEUE_CONCURRENCY_MAX: usize = 64;
/// Tries of one enqueue while the database restarts under the server.
pub const ENQUEUE_TRIES_MAX: u64 = 50;

/// The client of the server under test at `api` (the rig's servers run
/// without a token).
pub fn client(api: &str) -> Result<Client, RigError> {
    Client::new(api, None).map_err(|e| RigError::Enqueue(e.to_string()))
}

fn request(i: usize, store: usize) -> EnqueueRequest {
    EnqueueRequest::new(
        format!("store-{store:03}"),
        format!("+1555{:07}", i),
        format!("Order {i} has shipped."),
        format!("order-{i}"),
    )
}

/// Enqueues `actions` across `stores` in turn, 16 requests at a time. Any
/// answer but created or repeat ends the run with an error.
pub async fn enqueue_all(api: &Client, actions: usize, stores: usize) -> Result<(), RigError> {
    use futures::StreamExt;
    let results: Vec<Result<(), RigError>> = futures::stream::iter(0..actions)
        .map(|i| async move {
            match api.enqueue(&request(i, i % stores.max(1))).await {
                Ok(_) => Ok(()),
                Err(e) => Err(RigError::Enqueue(format!("enqueue {i}: {e}"))),
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The store of a draw: store 0 is `noisy_factor` times as likely as each
/// of the others.
fn weighted_store(x: usize, noisy_factor: usize) -> usize {
    if x < noisy_factor {
        0
    } else {
        x - noisy_factor + 1
    }
}

/// Enqueues at a steady rate over `span`, with one store `noisy_factor`
/// times busier than each of the others. An enqueue whose outcome is unknown
/// is sent again, the same request with the same key (the enqueue is
/// idempotent on it): the server may be briefly unable to reach a
/// restarting database. A refusal ends the run with an error. Returns the
/// client-side history: the id and key of every acknowledged enqueue
/// (created, or a repeat when a retry found the action its lost answer had
/// created), which must all be in the database.
pub async fn enqueue_weighted(
    api: Client,
    actions: usize,
    stores: usize,
    noisy_factor: usize,
    span: Duration,
    seed: u64,
) -> Result<Vec<Acked>, RigError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let weight_total = noisy_factor + stores.max(1) - 1;
    let t0 = Instant::now();
    let mut inflight = tokio::task::JoinSet::new();
    let mut acked = Vec::with_capacity(actions);
    for i in 0..actions {
        let due = t0 + span.mul_f64(i as f64 / actions.max(1) as f64);
        tokio::time::sleep_until(due.into()).await;
        let store = weighted_store(rng.random_range(0..weight_total), noisy_factor);
        inflight.spawn(enqueue_retrying(api.clone(), i, request(i, store)));
        while inflight.len() > ENQUEUE_CONCURRENCY_MAX {
            if let Some(r) = inflight.join_next().await {
                acked.push(r??);
            }
        }
    }
    while let Some(r) = inflight.join_next().await {
        acked.push(r??);
    }
    Ok(acked)
}

/// An enqueue the API acknowledged: the id it answered, and the key sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub id: i64,
    pub key: String,
}

/// Sends `req` until its outcome is known: the very same request, so the
/// same key, every time.
async fn enqueue_retrying(api: Client, i: usize, req: EnqueueRequest) -> Result<Acked, RigError> {
    let key = req.key.clone().unwrap_or_default();
    let mut last = String::new();
    for attempt in 0..ENQUEUE_TRIES_MAX {
        match api.enqueue(&req).await {
            Ok(done) => {
                let id = done.action().id;
                return Ok(Acked { id, key });
            }
            Err(e) if e.is_unknown() => last = e.to_string(),
            Err(e) => return Err(RigError::Enqueue(format!("enqueue {i}: {e}"))),
        }
        tokio::time::sleep(Duration::from_millis(100 + 20 * attempt)).await;
    }
    Err(RigError::Enqueue(format!(
        "enqueue {i} kept failing: {last}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_noisy_store_takes_its_share_of_draws() {
        // Factor 10 over 100 stores: draws 0..10 are store 0, then one each.
        let stores: Vec<usize> = (0..109).map(|x| weighted_store(x, 10)).collect();
        assert_eq!(stores.iter().filter(|s| **s == 0).count(), 10);
        assert_eq!(stores[10], 1);
        assert_eq!(stores[108], 99);
    }
}
