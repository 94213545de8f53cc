//! The actions a run enqueues, through the API with the typed client
//! (`courier_client`): action `i` is `order-i` for `+1555` followed by `i`
//! in seven digits.
//!
//! A chaos load also gives a seeded share of its actions a `not_before` or
//! an `expires_at` ahead of their enqueue, and cancels a seeded share
//! shortly after their enqueue is acknowledged ([`IntentMix`]); what it did
//! is counted in [`IntentCounts`].

use crate::RigError;
use chrono::{TimeDelta, Utc};
use courier_client::{Client, ClientError, EnqueueRequest};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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

/// How far ahead of its enqueue a scheduled action's `not_before` is drawn,
/// in milliseconds (uniformly, bounds included).
pub const SCHEDULED_AHEAD_MS: (u64, u64) = (1_000, 4_000);
/// The longest wait between an enqueue's acknowledgement and its cancel: a
/// short one is often refused because a worker claimed the action first.
pub const CANCEL_DELAY_MS_MAX: u64 = 100;

/// The share of a load's actions enqueued with a time, and the share
/// cancelled. Each action is scheduled, expiring or neither (one draw), and
/// cancelled or not (another draw).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IntentMix {
    /// Actions with a `not_before` [`SCHEDULED_AHEAD_MS`] ahead.
    pub scheduled_share: f64,
    /// Actions with an `expires_at` `expires_min_ms..=expires_max_ms` ahead.
    pub expiring_share: f64,
    /// Actions cancelled up to [`CANCEL_DELAY_MS_MAX`] after their enqueue
    /// is acknowledged.
    pub cancel_share: f64,
    pub expires_min_ms: u64,
    pub expires_max_ms: u64,
}

impl IntentMix {
    /// The chaos run's default: 10% scheduled, 10% expiring within 0.5 to
    /// 4 s, 5% cancelled.
    pub fn chaos() -> Self {
        IntentMix {
            scheduled_share: 0.10,
            expiring_share: 0.10,
            cancel_share: 0.05,
            expires_min_ms: 500,
            expires_max_ms: 4_000,
        }
    }

    /// No time and no cancel: every action is due at once and kept.
    pub fn none() -> Self {
        IntentMix {
            scheduled_share: 0.0,
            expiring_share: 0.0,
            cancel_share: 0.0,
            ..IntentMix::chaos()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        for (name, share) in [
            ("scheduled share", self.scheduled_share),
            ("expiring share", self.expiring_share),
            ("cancel share", self.cancel_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("the {name} must be within 0..=1, got {share}"));
            }
        }
        if self.scheduled_share + self.expiring_share > 1.0 {
            return Err(format!(
                "the scheduled and expiring shares add up to more than 1 ({} + {})",
                self.scheduled_share, self.expiring_share
            ));
        }
        if self.expires_min_ms == 0 || self.expires_min_ms > self.expires_max_ms {
            return Err(format!(
                "expires_min_ms must be at least 1 and at most expires_max_ms, got {}..{}",
                self.expires_min_ms, self.expires_max_ms
            ));
        }
        Ok(())
    }
}

/// What the load did about time and intent, counted while it runs (the
/// run's loop reads [`expired_at_enqueue`](Self::expired_at_enqueue) to know
/// how many actions to wait for).
#[derive(Debug, Default)]
pub struct IntentCounts {
    /// Enqueues sent with a `not_before`.
    pub scheduled: AtomicU64,
    /// Enqueues sent with an `expires_at`.
    pub expiring: AtomicU64,
    /// Expiring enqueues the server refused as `already_expired`: the
    /// deadline passed before the server took them (a slow answer, or a
    /// retry while the database restarted). Not acknowledged; an earlier
    /// try whose outcome was unknown may still have created the action.
    pub expired_at_enqueue: AtomicU64,
    /// Cancels sent (one per cancelled action, retries not counted).
    pub cancels_sent: AtomicU64,
    /// Cancels answered 200: the action is cancelled.
    pub cancels_accepted: AtomicU64,
    /// Cancels answered 409 (`claimed`, `dispatched`, `final`): nothing
    /// changed. A cancel sent again after an unknown outcome is refused
    /// `final` when its first try cancelled the action.
    pub cancels_refused: AtomicU64,
}

impl IntentCounts {
    pub fn snapshot(&self) -> IntentSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        IntentSnapshot {
            scheduled: get(&self.scheduled),
            expiring: get(&self.expiring),
            expired_at_enqueue: get(&self.expired_at_enqueue),
            cancels_sent: get(&self.cancels_sent),
            cancels_accepted: get(&self.cancels_accepted),
            cancels_refused: get(&self.cancels_refused),
        }
    }
}

/// [`IntentCounts`] at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IntentSnapshot {
    pub scheduled: u64,
    pub expiring: u64,
    pub expired_at_enqueue: u64,
    pub cancels_sent: u64,
    pub cancels_accepted: u64,
    pub cancels_refused: u64,
}

/// What the load does with one action besides enqueueing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Intent {
    /// Milliseconds from the enqueue to its `not_before`.
    not_before_in_ms: Option<u64>,
    /// Milliseconds from the enqueue to its `expires_at`.
    expires_in_ms: Option<u64>,
    /// Milliseconds from the acknowledgement to the cancel.
    cancel_after_ms: Option<u64>,
}

impl Intent {
    /// Three draws whatever the mix, so the stores drawn after them do not
    /// depend on it.
    fn draw(rng: &mut StdRng, mix: &IntentMix) -> Intent {
        let kind: f64 = rng.random();
        let ahead: f64 = rng.random();
        let cancel: f64 = rng.random();
        // `ahead` is below 1, so this stays within lo..=hi.
        let within = |(lo, hi): (u64, u64)| lo + ((hi - lo + 1) as f64 * ahead) as u64;
        let mut intent = Intent {
            not_before_in_ms: None,
            expires_in_ms: None,
            cancel_after_ms: None,
        };
        if kind < mix.scheduled_share {
            intent.not_before_in_ms = Some(within(SCHEDULED_AHEAD_MS));
        } else if kind < mix.scheduled_share + mix.expiring_share {
            intent.expires_in_ms = Some(within((mix.expires_min_ms, mix.expires_max_ms)));
        }
        if cancel < mix.cancel_share {
            // The same fraction of the draw that decided the cancel.
            let f = cancel / mix.cancel_share;
            intent.cancel_after_ms = Some((f * CANCEL_DELAY_MS_MAX as f64) as u64);
        }
        intent
    }

    /// The request with its times, counted.
    fn apply(&self, mut req: EnqueueRequest, counts: &IntentCounts) -> EnqueueRequest {
        let now = Utc::now();
        let ms = |v: u64| TimeDelta::milliseconds(v as i64);
        if let Some(v) = self.not_before_in_ms {
            req = req.with_not_before(now + ms(v));
            counts.scheduled.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(v) = self.expires_in_ms {
            req = req.with_expires_at(now + ms(v));
            counts.expiring.fetch_add(1, Ordering::Relaxed);
        }
        req
    }
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
/// times busier than each of the others, each action with the time and
/// cancel `mix` draws for it (counted in `counts`). An enqueue whose outcome
/// is unknown is sent again, the same request with the same key (the
/// enqueue is idempotent on it): the server may be briefly unable to reach
/// a restarting database. A refusal ends the run with an error, except an
/// expiring action's `already_expired` (counted). Returns the client-side
/// history: the id and key of every acknowledged enqueue (created, or a
/// repeat when a retry found the action its lost answer had created), which
/// must all be in the database.
pub async fn enqueue_weighted(
    api: Client,
    load: Load,
    mix: IntentMix,
    counts: Arc<IntentCounts>,
) -> Result<Vec<Acked>, RigError> {
    let mut rng = StdRng::seed_from_u64(load.seed);
    let weight_total = load.noisy_factor + load.stores.max(1) - 1;
    let t0 = Instant::now();
    let mut inflight = tokio::task::JoinSet::new();
    let mut acked = Vec::with_capacity(load.actions);
    for i in 0..load.actions {
        let due = t0 + load.span.mul_f64(i as f64 / load.actions.max(1) as f64);
        tokio::time::sleep_until(due.into()).await;
        let store = weighted_store(rng.random_range(0..weight_total), load.noisy_factor);
        let intent = Intent::draw(&mut rng, &mix);
        inflight.spawn(enqueue_then_cancel(
            api.clone(),
            i,
            request(i, store),
            intent,
            counts.clone(),
        ));
        while inflight.len() > ENQUEUE_CONCURRENCY_MAX {
            if let Some(r) = inflight.join_next().await {
                acked.extend(r??);
            }
        }
    }
    while let Some(r) = inflight.join_next().await {
        acked.extend(r??);
    }
    Ok(acked)
}

/// The shape of a steady load: how many actions over how long, across how
/// many stores, one of them `noisy_factor` times busier; `seed` draws the
/// stores and the intents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub actions: usize,
    pub stores: usize,
    pub noisy_factor: usize,
    pub span: Duration,
    pub seed: u64,
}

/// An enqueue the API acknowledged: the id it answered, and the key sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub id: i64,
    pub key: String,
}

/// Enqueues action `i` with its times, then cancels it when its intent
/// says so. `None`: an expiring enqueue refused as already expired.
async fn enqueue_then_cancel(
    api: Client,
    i: usize,
    req: EnqueueRequest,
    intent: Intent,
    counts: Arc<IntentCounts>,
) -> Result<Option<Acked>, RigError> {
    let req = intent.apply(req, &counts);
    let acked = match enqueue_retrying(&api, i, &req).await {
        Err(ClientError::Refused { reason, .. })
            if reason == "already_expired" && req.expires_at.is_some() =>
        {
            counts.expired_at_enqueue.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        Err(e) => return Err(RigError::Enqueue(format!("enqueue {i}: {e}"))),
        Ok(acked) => acked,
    };
    if let Some(ms) = intent.cancel_after_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        cancel_retrying(&api, acked.id, &counts).await?;
    }
    Ok(Some(acked))
}

/// Sends `req` until its outcome is known: the very same request, so the
/// same key (and the same times), every time. The last unknown outcome
/// when it never became known.
async fn enqueue_retrying(
    api: &Client,
    i: usize,
    req: &EnqueueRequest,
) -> Result<Acked, ClientError> {
    let key = req.key.clone().unwrap_or_default();
    let mut last = None;
    for attempt in 0..ENQUEUE_TRIES_MAX {
        match api.enqueue(req).await {
            Ok(done) => {
                let id = done.action().id;
                return Ok(Acked { id, key });
            }
            Err(e) if e.is_unknown() => last = Some(e),
            Err(e) => return Err(e),
        }
        tokio::time::sleep(Duration::from_millis(100 + 20 * attempt)).await;
    }
    Err(last.unwrap_or_else(|| ClientError::Unknown(format!("enqueue {i} was never tried"))))
}

/// Cancels action `id` until the answer is known: cancelled (200) or
/// refused (409) are both expected outcomes, counted; a 404 or any other
/// refusal is an error.
async fn cancel_retrying(api: &Client, id: i64, counts: &IntentCounts) -> Result<(), RigError> {
    counts.cancels_sent.fetch_add(1, Ordering::Relaxed);
    let mut last = String::new();
    for attempt in 0..ENQUEUE_TRIES_MAX {
        match api.cancel(id).await {
            Ok(Some(_)) => {
                counts.cancels_accepted.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Ok(None) => {
                return Err(RigError::Enqueue(format!(
                    "cancel {id}: the server has no such action"
                )))
            }
            Err(ClientError::Refused { status: 409, .. }) => {
                counts.cancels_refused.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) if e.is_unknown() => last = e.to_string(),
            Err(e) => return Err(RigError::Enqueue(format!("cancel {id}: {e}"))),
        }
        tokio::time::sleep(Duration::from_millis(100 + 20 * attempt)).await;
    }
    Err(RigError::Enqueue(format!(
        "cancel {id} kept failing: {last}"
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

    #[test]
    fn intents_take_their_shares_and_stay_in_their_ranges() {
        let mix = IntentMix::chaos();
        let mut rng = StdRng::seed_from_u64(7);
        let draws: Vec<Intent> = (0..10_000).map(|_| Intent::draw(&mut rng, &mix)).collect();
        let share = |f: &dyn Fn(&Intent) -> bool| {
            draws.iter().filter(|i| f(i)).count() as f64 / draws.len() as f64
        };
        let near = |got: f64, want: f64| (got - want).abs() < 0.015;
        assert!(near(share(&|i| i.not_before_in_ms.is_some()), 0.10));
        assert!(near(share(&|i| i.expires_in_ms.is_some()), 0.10));
        assert!(near(share(&|i| i.cancel_after_ms.is_some()), 0.05));
        assert_eq!(
            share(&|i| i.not_before_in_ms.is_some() && i.expires_in_ms.is_some()),
            0.0
        );
        for i in &draws {
            if let Some(v) = i.not_before_in_ms {
                assert!(
                    (SCHEDULED_AHEAD_MS.0..=SCHEDULED_AHEAD_MS.1).contains(&v),
                    "{v}"
                );
            }
            if let Some(v) = i.expires_in_ms {
                assert!(
                    (mix.expires_min_ms..=mix.expires_max_ms).contains(&v),
                    "{v}"
                );
            }
            if let Some(v) = i.cancel_after_ms {
                assert!(v <= CANCEL_DELAY_MS_MAX, "{v}");
            }
        }
        // Without a mix, nothing is timed or cancelled, and the draws (so
        // the stores drawn after them) are taken all the same.
        let mut a = StdRng::seed_from_u64(7);
        let mut b = StdRng::seed_from_u64(7);
        let none = Intent::draw(&mut a, &IntentMix::none());
        Intent::draw(&mut b, &mix);
        assert_eq!(
            none,
            Intent {
                not_before_in_ms: None,
                expires_in_ms: None,
                cancel_after_ms: None
            }
        );
        assert_eq!(a.random::<u64>(), b.random::<u64>());
    }

    #[test]
    fn a_mix_out_of_its_bounds_is_refused() {
        assert_eq!(IntentMix::chaos().validate(), Ok(()));
        let bad = [
            IntentMix {
                cancel_share: 1.5,
                ..IntentMix::chaos()
            },
            IntentMix {
                scheduled_share: 0.6,
                expiring_share: 0.6,
                ..IntentMix::chaos()
            },
            IntentMix {
                expires_min_ms: 5_000,
                ..IntentMix::chaos()
            },
            IntentMix {
                expires_min_ms: 0,
                ..IntentMix::chaos()
            },
        ];
        for mix in bad {
            assert!(mix.validate().is_err(), "{mix:?}");
        }
    }
}
