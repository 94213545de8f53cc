//! The store against a real PostgreSQL (see courier-testkit): fencing, claims,
//! merges and enqueue. Each test gets a fresh database.

use courier_core::status::Merge;
use courier_core::{action_key, ActionState, Status};
use courier_store::*;
use courier_testkit::fixtures::{
    self, expire_lease, new_action, settle, settled_ok, webhook, MESSAGE_ID,
};
use courier_testkit::fresh_db;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

async fn enqueue_many(store: &PgStore, s: &str, n: usize) {
    fixtures::enqueued(store, s, n).await;
}

fn owner(name: &str) -> Arc<str> {
    Arc::from(name)
}

async fn claim(store: &PgStore, who: &Arc<str>, n: u32, ttl_ms: u64) -> Vec<Claimed> {
    fixtures::claim(store, who, n, ttl_ms, 1_000, ClaimMode::Fair)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_double_claim_under_concurrent_claimers() {
    let db = fresh_db().await;
    for s in 0..10 {
        enqueue_many(&db.store, &format!("s{s}"), 50).await;
    }
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = db.store.clone();
        tasks.push(tokio::spawn(async move {
            let who = owner(&format!("w{w}"));
            let mut mine = Vec::new();
            loop {
                let got = fixtures::claim(&store, &who, 7, 60_000, 1_000, ClaimMode::Fair)
                    .await
                    .unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|c| c.lease.action_id));
            }
            mine
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for t in tasks {
        for id in t.await.unwrap() {
            total += 1;
            assert!(seen.insert(id), "action {id} claimed twice");
        }
    }
    assert_eq!(total, 500);
    assert_eq!(seen.len(), 500);
}

#[tokio::test]
async fn a_worker_whose_lease_was_taken_can_write_nothing() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    enqueue_many(&store, "s1", 1).await;
    let a = owner("a");
    let b = owner("b");
    let got = claim(&store, &a, 1, 100).await;
    let old = got[0].lease.clone();
    let key = action_key(&got[0].uid);
    // A writes the intent, then stalls past its lease.
    store.outbox_intent(&old, &key).await.unwrap().unwrap();
    expire_lease(&clock, 100);
    let got_b = claim(&store, &b, 1, 60_000).await;
    assert_eq!(got_b.len(), 1);
    assert!(got_b[0].reclaimed);
    assert_eq!(got_b[0].lease.epoch, old.epoch + 1);

    // Every write of the old owner is refused, and says so as data.
    assert!(matches!(
        db.store.outbox_intent(&old, &key).await.unwrap(),
        Err(Fenced { current_epoch: Some(e) }) if e == old.epoch + 1
    ));
    assert!(matches!(
        db.store.outbox_count_attempt(&old, 0).await.unwrap(),
        AttemptOutcome::Fenced(_)
    ));
    let beat = db
        .store
        .action_heartbeat(&old.owner, &[(old.action_id, old.epoch)], 60_000)
        .await
        .unwrap();
    assert_eq!(beat.held, Vec::<i64>::new());
    assert_eq!(beat.fenced, vec![old.action_id]);
    assert!(matches!(
        settle(&db.store, &old, Status::Accepted, Some(MESSAGE_ID), false).await,
        SettleOutcome::Fenced(_)
    ));
    assert!(matches!(
        db.store.action_fail(&old, 400, "x").await.unwrap(),
        Err(Fenced { current_epoch: Some(e) }) if e == old.epoch + 1
    ));
    // Nothing the old owner tried changed the row: no attempt, still claimed by b.
    let view = db.store.action_get(old.action_id).await.unwrap().unwrap();
    assert_eq!(view.state, ActionState::Claimed);
    assert_eq!(view.attempts, 0);
    assert_eq!(view.status, Some(Status::Sending));
    // The new owner can.
    let new = got_b[0].lease.clone();
    assert_eq!(
        db.store.outbox_count_attempt(&new, 0).await.unwrap(),
        AttemptOutcome::Counted(1)
    );
    let settled =
        settled_ok(settle(&db.store, &new, Status::Accepted, Some(MESSAGE_ID), false).await);
    assert_eq!(settled.status, Status::Accepted);
    // The refusals were answered as data; the store recorded none of them
    // (the worker's `observe` writes the `fenced` rows).
    let summary = db.store.summary(1800).await.unwrap();
    assert_eq!(summary.event("fenced"), 0, "{:?}", summary.events);
}

#[tokio::test]
async fn a_heartbeat_keeps_a_slow_workers_lease() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    enqueue_many(&store, "s1", 1).await;
    let a = owner("a");
    let got = claim(&store, &a, 1, 300).await;
    let lease = got[0].lease.clone();
    // A slow worker heartbeats every 100 ms for 1 s (on the moved clock):
    // three lease lengths.
    for _ in 0..10 {
        clock.advance(Duration::from_millis(100));
        let beat = store
            .action_heartbeat(&lease.owner, &[(lease.action_id, lease.epoch)], 300)
            .await
            .unwrap();
        assert_eq!(beat.held, vec![lease.action_id]);
        assert!(beat.fenced.is_empty());
        // Nobody else can take it meanwhile.
        assert!(claim(&store, &owner("b"), 1, 300).await.is_empty());
    }
    let key = action_key(&got[0].uid);
    assert!(store.outbox_intent(&lease, &key).await.unwrap().is_ok());
    // Without heartbeats the lease runs out and another worker takes over.
    // A lease holds up to and including its last instant...
    clock.advance(Duration::from_millis(300));
    assert!(claim(&store, &owner("b"), 1, 300).await.is_empty());
    // ...and not a millisecond longer.
    clock.advance(Duration::from_millis(1));
    assert_eq!(claim(&store, &owner("b"), 1, 300).await.len(), 1);
}

#[tokio::test]
async fn a_reclaimed_action_continues_from_the_lookup() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    enqueue_many(&store, "s1", 1).await;
    let got = claim(&store, &owner("a"), 1, 100).await;
    let a = got[0].lease.clone();
    let key = action_key(&got[0].uid);
    let intent = store.outbox_intent(&a, &key).await.unwrap().unwrap();
    assert!(intent.written_now);
    assert_eq!(intent.attempts, 0);
    assert_eq!(
        store.outbox_count_attempt(&a, 0).await.unwrap(),
        AttemptOutcome::Counted(1)
    );
    // A dies here, after its request may have left.
    expire_lease(&clock, 100);
    let got = claim(&store, &owner("b"), 1, 60_000).await;
    let b = got[0].lease.clone();
    let intent = store.outbox_intent(&b, &key).await.unwrap().unwrap();
    // The intent is the same row with the same key, and the counted attempt
    // tells b to look up before anything else.
    assert!(!intent.written_now);
    assert_eq!(intent.key, key);
    assert_eq!(intent.attempts, 1);
    assert_eq!(
        courier_core::step::after_claim(intent.attempts, intent.status),
        courier_core::step::Step::Lookup
    );
}

#[tokio::test]
async fn a_lease_about_to_end_refuses_the_attempt() {
    let db = fresh_db().await;
    enqueue_many(&db.store, "s1", 1).await;
    let got = claim(&db.store, &owner("a"), 1, 1_000).await;
    let a = got[0].lease.clone();
    db.store
        .outbox_intent(&a, &action_key(&got[0].uid))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        db.store.outbox_count_attempt(&a, 5_000).await.unwrap(),
        AttemptOutcome::LeaseShort
    );
    assert_eq!(
        db.store.outbox_count_attempt(&a, 10).await.unwrap(),
        AttemptOutcome::Counted(1)
    );
}

async fn dispatched_action(db: &courier_testkit::TestDb) -> (Lease, String) {
    enqueue_many(&db.store, "s1", 1).await;
    let held = fixtures::settled(&db.store).await;
    (held.lease, held.key)
}

#[tokio::test]
async fn a_duplicate_webhook_is_a_no_op() {
    let db = fresh_db().await;
    let (lease, key) = dispatched_action(&db).await;
    let first = webhook(&db.store, "evt_1", &key, Status::Sent).await;
    assert_eq!(first, MergeOutcome::Applied(Merge::Advance(Status::Sent)));
    let again = webhook(&db.store, "evt_1", &key, Status::Sent).await;
    assert_eq!(again, MergeOutcome::Duplicate);
    // Even a duplicate id carrying something else changes nothing.
    let forged = webhook(&db.store, "evt_1", &key, Status::Failed).await;
    assert_eq!(forged, MergeOutcome::Duplicate);
    let view = db.store.action_get(lease.action_id).await.unwrap().unwrap();
    assert_eq!(view.status, Some(Status::Sent));
    assert_eq!(view.state, ActionState::Dispatched);
    let s = db.store.summary(1800).await.unwrap();
    assert_eq!(s.event("duplicate_webhook"), 2);
}

#[tokio::test]
async fn a_backward_report_is_ignored_and_counted() {
    let db = fresh_db().await;
    let (lease, key) = dispatched_action(&db).await;
    let out = webhook(&db.store, "evt_d", &key, Status::Delivered).await;
    assert_eq!(
        out,
        MergeOutcome::Applied(Merge::Advance(Status::Delivered))
    );
    let out = webhook(&db.store, "evt_s", &key, Status::Sent).await;
    assert_eq!(out, MergeOutcome::Applied(Merge::Backward));
    let view = db.store.action_get(lease.action_id).await.unwrap().unwrap();
    assert_eq!(view.status, Some(Status::Delivered));
    assert_eq!(view.state, ActionState::Done);
    assert_eq!(db.store.summary(1800).await.unwrap().event("backward"), 1);
}

#[tokio::test]
async fn two_different_finals_wait_for_the_lookup() {
    let db = fresh_db().await;
    let (lease, key) = dispatched_action(&db).await;
    webhook(&db.store, "e1", &key, Status::Delivered).await;
    let out = webhook(&db.store, "e2", &key, Status::Failed).await;
    assert_eq!(out, MergeOutcome::Applied(Merge::Conflict));
    // The conflict makes the action due for a lookup at once.
    let due = db.store.outbox_due_checks(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].key, key);
    // The verifier sees no final status while the conflict stands.
    let outcomes = db.store.action_outcomes().await.unwrap();
    assert_eq!(outcomes[0].final_status, None);
    db.store
        .lookup_merge(&key, Status::Failed, "msg_1")
        .await
        .unwrap();
    let view = db.store.action_get(lease.action_id).await.unwrap().unwrap();
    assert_eq!(view.status, Some(Status::Failed));
    let outcomes = db.store.action_outcomes().await.unwrap();
    assert_eq!(outcomes[0].final_status, Some(Status::Failed));
}

#[tokio::test]
async fn enqueue_is_idempotent_on_store_and_key() {
    let db = fresh_db().await;
    let mut a = new_action("s1", 1);
    a.key = Some("order-1".into());
    let first = db.store.action_enqueue(&a).await.unwrap();
    let Enqueued::Created(id) = first else {
        panic!("{first:?}")
    };
    assert_eq!(
        db.store.action_enqueue(&a).await.unwrap(),
        Enqueued::Existing(id)
    );
    // The same key in another store is another action.
    let mut other = a.clone();
    other.store = "s2".into();
    assert!(
        matches!(db.store.action_enqueue(&other).await.unwrap(), Enqueued::Created(i) if i != id)
    );
    // The same key with another body is refused and changes nothing.
    let mut changed = a.clone();
    changed.body = "something else".into();
    assert!(matches!(
        db.store.action_enqueue(&changed).await,
        Err(EnqueueError::KeyReused { existing_id, .. }) if existing_id == Some(id)
    ));
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 2);
}

#[tokio::test]
async fn enqueue_joins_the_callers_transaction() {
    let db = fresh_db().await;
    let mut client = db.store.client().await.unwrap();
    let tx = client.transaction().await.unwrap();
    action_enqueue(&*tx, &new_action("s1", 1)).await.unwrap();
    // Rolled back with the caller's own rows: nothing is enqueued.
    tx.rollback().await.unwrap();
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);
    let tx = client.transaction().await.unwrap();
    action_enqueue(&*tx, &new_action("s1", 2)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 1);
}

#[tokio::test]
async fn fair_claims_rotate_stores_despite_a_deep_backlog() {
    let db = fresh_db().await;
    // The noisy store enqueues first and deep; the quiet ones later.
    enqueue_many(&db.store, "noisy", 300).await;
    for s in 0..5 {
        enqueue_many(&db.store, &format!("quiet{s}"), 3).await;
    }
    let who = owner("w");
    let mut order = Vec::new();
    for _ in 0..12 {
        let got = fixtures::claim(&db.store, &who, 1, 60_000, 2, ClaimMode::Fair)
            .await
            .unwrap();
        if let Some(c) = got.first() {
            order.push(c.store.clone());
        }
    }
    // Every quiet store is served within the first six claims, and the noisy
    // store never holds more than its cap of two.
    let first_six: HashSet<_> = order[..6].iter().cloned().collect();
    for s in 0..5 {
        assert!(first_six.contains(&format!("quiet{s}")), "{order:?}");
    }
    assert_eq!(
        order.iter().filter(|s| *s == "noisy").count(),
        2,
        "{order:?}"
    );

    // FIFO, for contrast, serves the noisy backlog first.
    let db = fresh_db().await;
    enqueue_many(&db.store, "noisy", 300).await;
    enqueue_many(&db.store, "quiet0", 3).await;
    let got = fixtures::claim(&db.store, &who, 10, 60_000, 2, ClaimMode::Fifo)
        .await
        .unwrap();
    assert!(got.iter().all(|c| c.store == "noisy"));
}

#[tokio::test]
async fn a_batch_claim_respects_the_cap_and_takes_turns() {
    let db = fresh_db().await;
    enqueue_many(&db.store, "a", 10).await;
    enqueue_many(&db.store, "b", 10).await;
    enqueue_many(&db.store, "c", 1).await;
    let got = fixtures::claim(&db.store, &owner("w"), 7, 60_000, 3, ClaimMode::Fair)
        .await
        .unwrap();
    let count = |s: &str| got.iter().filter(|c| c.store == s).count();
    assert_eq!((count("a"), count("b"), count("c")), (3, 3, 1));
    // At the cap, the stores get nothing more until something settles.
    let more = fixtures::claim(&db.store, &owner("w"), 7, 60_000, 3, ClaimMode::Fair)
        .await
        .unwrap();
    assert!(more.is_empty(), "{more:?}");
    let first_a = got.iter().find(|c| c.store == "a").unwrap();
    let key = action_key(&first_a.uid);
    db.store
        .outbox_intent(&first_a.lease, &key)
        .await
        .unwrap()
        .unwrap();
    settled_ok(settle(&db.store, &first_a.lease, Status::Accepted, None, false).await);
    let more = fixtures::claim(&db.store, &owner("w"), 7, 60_000, 3, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].store, "a");
}

#[tokio::test]
async fn a_heartbeat_after_our_own_settle_is_not_a_fence() {
    let db = fresh_db().await;
    let (lease, _key) = dispatched_action(&db).await;
    let beat = db
        .store
        .action_heartbeat(&lease.owner, &[(lease.action_id, lease.epoch)], 60_000)
        .await
        .unwrap();
    assert!(beat.held.is_empty() && beat.fenced.is_empty(), "{beat:?}");
}

#[tokio::test]
async fn a_settle_retried_after_a_lost_commit_answer_is_accepted() {
    let db = fresh_db().await;
    let (lease, _key) = dispatched_action(&db).await;
    // The same owner settles again (as after a lost commit answer).
    let again = settle(&db.store, &lease, Status::Accepted, Some(MESSAGE_ID), false).await;
    assert_eq!(
        again,
        SettleOutcome::Settled(Settled {
            status: Status::Accepted,
            merge: Merge::Same
        })
    );
}

/// Every pooled connection runs without JIT (src/pool.rs says why), and
/// keeps the options its URL gives; a connection of its own (the control)
/// has the server's default, JIT on.
#[tokio::test]
async fn pooled_connections_run_without_jit_and_keep_the_urls_options() {
    let db = fresh_db().await;
    async fn show(c: &tokio_postgres::Client, what: &str) -> String {
        c.query_one(&format!("SHOW {what}"), &[])
            .await
            .unwrap()
            .get(0)
    }
    let pooled = db.store.client().await.unwrap();
    assert_eq!(show(&pooled, "jit").await, "off");
    let raw = db.raw_client().await;
    assert_eq!(show(&raw, "jit").await, "on", "the server's default");

    let mut cfg = StoreConfig::new(format!("{}?options=-c%20statement_timeout%3D12345", db.url));
    cfg.migrate = false;
    let with_options = PgStore::connect(&cfg).await.unwrap();
    let c = with_options.client().await.unwrap();
    assert_eq!(show(&c, "jit").await, "off");
    assert_eq!(show(&c, "statement_timeout").await, "12345ms");
}
