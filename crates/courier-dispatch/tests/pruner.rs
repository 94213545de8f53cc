//! A `Worker` used as a library prunes: `Worker::run` runs the pruner its
//! config names, as `courier worker` does, so finished actions past their
//! retention disappear without the caller starting anything beside it.
//! Time is the store's manual clock, moved past the retention instead of
//! waited for.

use courier_core::{Limits, Retention, Status};
use courier_dispatch::pruner::PrunerConfig;
use courier_dispatch::worker::{Provider, Worker, WorkerConfig};
use courier_provider::{LookupOutcome, SendOutcome};
use courier_store::{ClaimMode, MergeOutcome, PgStore};
use courier_testkit::{fixtures, fresh_db};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The provider of a worker with nothing pending and no reconciler: never asked.
struct NeverAsked;

impl Provider for NeverAsked {
    async fn send(&self, key: &str, _to: &str, _body: &str) -> SendOutcome {
        panic!("nothing was pending, yet {key} was sent")
    }

    async fn lookup(&self, key: &str) -> LookupOutcome {
        panic!("nothing was due, yet {key} was looked up")
    }
}

/// One action taken through to `done` (settled, then delivered by webhook).
async fn finished(store: &PgStore, tag: &str) -> i64 {
    fixtures::enqueued(store, "s1", 1).await;
    let held = fixtures::settled(store).await;
    let out = fixtures::webhook(store, &format!("evt-{tag}"), &held.key, Status::Delivered).await;
    assert!(matches!(out, MergeOutcome::Applied(_)), "{out:?}");
    held.lease.action_id
}

#[tokio::test]
async fn a_library_worker_prunes_finished_actions_past_their_retention() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let old = finished(&store, "old").await;
    // Dispatched, not final: no retention removes it.
    fixtures::enqueued(&store, "s1", 1).await;
    let open = fixtures::settled(&store).await.lease.action_id;
    let retention = Retention::default();
    clock.advance(Duration::from_secs(
        retention.action_retention_s + Limits::default().key_retention_s + 60,
    ));
    // Finished just now, on the same clock: inside its retention.
    let recent = finished(&store, "recent").await;

    let limits = Limits::default();
    let worker = Worker::new(
        store.clone(),
        NeverAsked,
        WorkerConfig {
            pruner: Some(PrunerConfig::new(&retention, &limits)),
            limits,
            claim_mode: ClaimMode::Fair,
            owner: "library-worker".into(),
            idle_poll_ms: 10,
            reconcile: false,
            seed: 1,
            tier: courier_core::Tier::A,
            provider_gate: None,
        },
    );
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await }
    });

    let deadline = Instant::now() + Duration::from_secs(20);
    while store.action_get(old).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the worker's pruner did not remove action {old} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        store.action_get(open).await.unwrap().is_some(),
        "an action that is not final went"
    );
    assert!(
        store.action_get(recent).await.unwrap().is_some(),
        "an action inside its retention went"
    );
    shutdown.cancel();
    run.await.unwrap();
}
