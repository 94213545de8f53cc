//! The actions a run enqueues, through the API (`POST /v1/actions`): action
//! `i` is `order-i` for `+1555` followed by `i` in seven digits.

use crate::RigError;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::time::{Duration, Instant};

/// Requests in flight at once.
pub const ENQUEUE_CONCURRENCY_MAX: usize = 64;
/// Tries of one enqueue while the database restarts under the server.
pub const ENQUEUE_TRIES_MAX: u64 = 50;

fn body(i: usize, store: usize) -> serde_json::Value {
    serde_json::json!({
        "store": format!("store-{store:03}"),
        "to": format!("+1555{:07}", i),
        "body": format!("Order {i} has shipped."),
        "key": format!("order-{i}"),
    })
}

/// Enqueues `actions` across `stores` in turn, 16 requests at a time.
pub async fn enqueue_all(api: &str, actions: usize, stores: usize) -> Result<(), RigError> {
    use futures::StreamExt;
    let http = reqwest::Client::new();
    let url = format!("{api}/v1/actions");
    let results: Vec<Result<(), RigError>> = futures::stream::iter(0..actions)
        .map(|i| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let req = http.post(&url).json(&body(i, i % stores.max(1)));
                let resp = req.send().await.map_err(|e| enqueue_error(i, e))?;
                if resp.status().is_success() {
                    return Ok(());
                }
                let status = resp.status();
                let text = resp.text().await.unwrap_or_default();
                Err(RigError::Enqueue(format!("enqueue {i}: {status} {text}")))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

fn enqueue_error(i: usize, e: reqwest::Error) -> RigError {
    RigError::Enqueue(format!("enqueue {i}: {e}"))
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
/// times busier than each of the others. A request that fails is retried
/// (the enqueue is idempotent on its key): the server may be briefly unable
/// to reach a restarting database. Returns the client-side history: the id
/// and key of every acknowledged enqueue (201, or 200 when a retry found the
/// action its lost answer had created), which must all be in the database.
pub async fn enqueue_weighted(
    api: String,
    actions: usize,
    stores: usize,
    noisy_factor: usize,
    span: Duration,
    seed: u64,
) -> Result<Vec<Acked>, RigError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let weight_total = noisy_factor + stores.max(1) - 1;
    let http = reqwest::Client::new();
    let url = format!("{api}/v1/actions");
    let t0 = Instant::now();
    let mut inflight = tokio::task::JoinSet::new();
    let mut acked = Vec::with_capacity(actions);
    for i in 0..actions {
        let due = t0 + span.mul_f64(i as f64 / actions.max(1) as f64);
        tokio::time::sleep_until(due.into()).await;
        let store = weighted_store(rng.random_range(0..weight_total), noisy_factor);
        inflight.spawn(enqueue_retrying(
            http.clone(),
            url.clone(),
            i,
            body(i, store),
        ));
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

async fn enqueue_retrying(
    http: reqwest::Client,
    url: String,
    i: usize,
    body: serde_json::Value,
) -> Result<Acked, RigError> {
    let key = body["key"].as_str().unwrap_or_default().to_string();
    let mut last = String::new();
    for attempt in 0..ENQUEUE_TRIES_MAX {
        match http.post(&url).json(&body).send().await {
            Ok(r) if r.status().is_success() => {
                let view: serde_json::Value = r.json().await.unwrap_or_default();
                match view["id"].as_i64() {
                    Some(id) => return Ok(Acked { id, key }),
                    None => last = format!("an answer without an id: {view}"),
                }
            }
            Ok(r) => last = format!("{}", r.status()),
            Err(e) => last = e.to_string(),
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
