//! A worker at tier c against a scripted provider, on a real PostgreSQL: a
//! request that may have reached the provider (no definite answer) holds
//! the action `unknown` and is never sent again; an answer that says
//! nothing was created (a refusal of our credentials) is not a reason to
//! hold, and the action is sent again.

mod common;

use courier_core::{ActionState, Limits, Status, Tier, UnknownPolicy};
use courier_dispatch::worker::{Provider, Worker, WorkerConfig};
use courier_provider::wire::MessageView;
use courier_provider::{LookupOutcome, SendOutcome};
use courier_store::{ClaimMode, PgStore};
use courier_testkit::{fixtures, fresh_db};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Answers the first send with `first`, every later one accepted; counts
/// sends and lookups.
#[derive(Clone)]
struct Scripted {
    first: SendOutcome,
    sends: Arc<AtomicU32>,
    lookups: Arc<AtomicU32>,
}

impl Provider for Scripted {
    async fn send(&self, key: &str, _to: &str, _body: &str) -> SendOutcome {
        if self.sends.fetch_add(1, Ordering::SeqCst) == 0 {
            return self.first.clone();
        }
        SendOutcome::Accepted(MessageView {
            id: "m-1".into(),
            key: key.to_string(),
            status: Status::Accepted,
            updated_at: None,
        })
    }
    async fn lookup(&self, _key: &str) -> LookupOutcome {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        LookupOutcome::Unknown("tier c has no lookup".into())
    }
}

async fn run_tier_c(store: &PgStore, first: SendOutcome) -> (Scripted, ActionState) {
    let p = Scripted {
        first,
        sends: Arc::default(),
        lookups: Arc::default(),
    };
    let id = store
        .action_enqueue(&fixtures::new_action("s1", 0))
        .await
        .unwrap()
        .id();
    let w = Worker::new(
        store.clone(),
        p.clone(),
        WorkerConfig {
            limits: Limits::default(),
            claim_mode: ClaimMode::Fair,
            owner: "tier-c".into(),
            idle_poll_ms: 10,
            reconcile: true,
            pruner: None,
            seed: 3,
            tier: Tier::C(UnknownPolicy::Hold),
            provider_gate: None,
        },
    );
    let stop = CancellationToken::new();
    let run = tokio::spawn({
        let stop = stop.clone();
        async move { w.run(stop).await }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let state = loop {
        let s = store.action_get(id).await.unwrap().unwrap().state;
        if s.is_at_rest() || s == ActionState::Dispatched {
            break s;
        }
        assert!(Instant::now() < deadline, "still {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.cancel();
    run.await.unwrap();
    (p, state)
}

#[tokio::test]
async fn an_answer_that_may_have_created_holds_and_is_never_sent_again() {
    let db = fresh_db().await;
    let (p, state) = run_tier_c(&db.store, SendOutcome::Unknown("time-out".into())).await;
    assert_eq!(state, ActionState::Unknown);
    assert_eq!(p.sends.load(Ordering::SeqCst), 1, "never sent again");
    assert_eq!(p.lookups.load(Ordering::SeqCst), 0, "tier c asks nothing");
    assert_eq!(db.store.actions_unknown(10, None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_refusal_of_our_credentials_is_sent_again_not_held() {
    let db = fresh_db().await;
    let refused = SendOutcome::Rejected {
        status: 401,
        error: "unauthorized".into(),
    };
    let (p, state) = run_tier_c(&db.store, refused).await;
    assert_eq!(state, ActionState::Dispatched);
    assert_eq!(p.sends.load(Ordering::SeqCst), 2);
    assert_eq!(p.lookups.load(Ordering::SeqCst), 0);
    assert!(db.store.actions_unknown(10, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_429_that_created_nothing_is_sent_again_not_held() {
    let db = fresh_db().await;
    let throttled = SendOutcome::NotCreated {
        status: 429,
        error: "error 20429: Too Many Requests".into(),
        retry_after_ms: None,
    };
    let (p, state) = run_tier_c(&db.store, throttled).await;
    assert_eq!(state, ActionState::Dispatched);
    assert_eq!(p.sends.load(Ordering::SeqCst), 2);
    assert!(db.store.actions_unknown(10, None).await.unwrap().is_empty());
}
