//! Tests that kill the mutants `cargo mutants` found alive in the store's
//! protocol code (claim, intent, attempt, settle, merge), or found caught only
//! by courier-dispatch's end-to-end run, against a real PostgreSQL (see
//! courier-testkit). Each test names the behaviour it pins down; the comment
//! above it names the mutant it kills.
//!
//! The mutation run that found them (from the workspace root) was
//! `cargo mutants --in-place --test-tool nextest -f crates/courier-store/src/queries.rs
//! -F '\b(action_settle|settle_refused|merge_unleased|...)\b'`, before the
//! store kept only its batch forms: the single settle's fold now lives in
//! `src/settle.rs` (`settles_fold`, `settle_refused`) and the unleased merge's
//! in `src/merge.rs` (`merges_fold`); the tests drive those, through batches
//! of one.

use courier_core::status::Merge;
use courier_core::{action_key, ActionState, Status};
use courier_store::*;
use courier_testkit::fixtures::{expire_lease, settle, settled_ok, webhook};
use courier_testkit::{fixtures, fresh_db, TestDb};
use std::sync::Arc;

/// A lease that outlives every test.
const LONG_LEASE_MS: u64 = 600_000;
/// A lease short enough to run out within a test.
const SHORT_LEASE_MS: u64 = 100;

fn owner(name: &str) -> Arc<str> {
    Arc::from(name)
}

/// Enqueues one action and claims it for `who`: the lease and the action's key.
async fn claimed_action(db: &TestDb, who: &Arc<str>, lease_ttl_ms: u64) -> (Lease, String) {
    db.store
        .action_enqueue(&NewAction {
            store: "s1".to_string(),
            to: "+15551234567".to_string(),
            body: "order 1 shipped".to_string(),
            key: None,
            ..Default::default()
        })
        .await
        .unwrap();
    let got = fixtures::claim(&db.store, who, 1, lease_ttl_ms, 1_000, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    (got[0].lease.clone(), action_key(&got[0].uid))
}

/// Enqueues, claims, writes the intent and counts one attempt: the state just
/// before the provider's answer is settled.
async fn sent_action(db: &TestDb, who: &Arc<str>) -> (Lease, String) {
    let (lease, key) = intent_written(db, who, LONG_LEASE_MS).await;
    assert_eq!(
        db.store.outbox_count_attempt(&lease, 0).await.unwrap(),
        AttemptOutcome::Counted(1)
    );
    (lease, key)
}

/// Enqueues, claims and writes the intent, without counting an attempt (an
/// attempt needs a lease that outlasts its margin; the intent needs only the
/// fence, so this works with a lease that has already run out).
async fn intent_written(db: &TestDb, who: &Arc<str>, lease_ttl_ms: u64) -> (Lease, String) {
    let (lease, key) = claimed_action(db, who, lease_ttl_ms).await;
    let intent = db.store.outbox_intent(&lease, &key).await.unwrap().unwrap();
    assert!(intent.written_now);
    (lease, key)
}

/// Moves the clock past the lease of `action_id` (taken at most
/// [`SHORT_LEASE_MS`] before) and claims for `who`: the expired lease is
/// taken over; returns the new lease.
async fn reclaim(db: &TestDb, who: &Arc<str>, action_id: i64) -> Lease {
    let (store, clock) = db.manual_clock().await;
    expire_lease(&clock, SHORT_LEASE_MS);
    let got = fixtures::claim(&store, who, 1, LONG_LEASE_MS, 1_000, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    let c = &got[0];
    assert_eq!(c.lease.action_id, action_id);
    assert!(c.reclaimed, "{c:?}");
    c.lease.clone()
}

async fn view(db: &TestDb, action_id: i64) -> ActionView {
    db.store.action_get(action_id).await.unwrap().unwrap()
}

// Kills `delete !` in the settle's fold (done = final && conflict),
// which before only the dispatch end-to-end run caught, by a timeout: a
// settle with a final status and no conflict finishes the action at once.
#[tokio::test]
async fn a_settle_with_a_final_status_finishes_the_action() {
    let db = fresh_db().await;
    let (lease, _key) = sent_action(&db, &owner("a")).await;
    let settled = settle(&db.store, &lease, Status::Delivered, Some("msg_1"), true).await;
    assert_eq!(
        settled,
        SettleOutcome::Settled(Settled {
            status: Status::Delivered,
            merge: Merge::Advance(Status::Delivered)
        })
    );
    let v = view(&db, lease.action_id).await;
    assert_eq!(
        (v.state, v.status),
        (ActionState::Done, Some(Status::Delivered))
    );
    assert_eq!(v.message_id.as_deref(), Some("msg_1"));
    // A finished action is not due for a reconciling lookup.
    assert!(db
        .store
        .outbox_due_checks(10, 60_000)
        .await
        .unwrap()
        .is_empty());
    let outcomes = db.store.action_outcomes().await.unwrap();
    assert_eq!(outcomes[0].final_status, Some(Status::Delivered));
}

// Kills `replace && with || in PgStore::actions_settle` and `delete !` there
// from the other side: a settle whose report conflicts with a final status a
// webhook already recorded leaves the action open and due for a lookup.
#[tokio::test]
async fn a_settle_conflicting_with_an_earlier_webhook_waits_for_the_lookup() {
    let db = fresh_db().await;
    let (lease, key) = sent_action(&db, &owner("a")).await;
    // The provider's webhook overtakes the worker's own settle.
    assert_eq!(
        webhook(&db.store, "evt_early", &key, Status::Delivered).await,
        MergeOutcome::Applied(Merge::Advance(Status::Delivered))
    );
    // The action is still claimed: a webhook never finishes a claimed action.
    assert_eq!(view(&db, lease.action_id).await.state, ActionState::Claimed);
    let settled = settle(&db.store, &lease, Status::Failed, Some("msg_1"), false).await;
    assert_eq!(
        settled,
        SettleOutcome::Settled(Settled {
            status: Status::Delivered,
            merge: Merge::Conflict
        })
    );
    let v = view(&db, lease.action_id).await;
    assert_eq!(
        (v.state, v.status),
        (ActionState::Dispatched, Some(Status::Delivered))
    );
    assert_eq!(
        db.store.action_outcomes().await.unwrap()[0].final_status,
        None
    );
    assert_eq!(db.store.summary(1800).await.unwrap().event("conflict"), 1);
    // The lookup's final word settles it and finishes the action.
    assert_eq!(
        db.store
            .lookup_merge(&key, Status::Failed, "msg_1")
            .await
            .unwrap(),
        MergeOutcome::Applied(Merge::Advance(Status::Failed))
    );
    let v = view(&db, lease.action_id).await;
    assert_eq!(
        (v.state, v.status),
        (ActionState::Done, Some(Status::Failed))
    );
}

// Kills `replace == with != in PgStore::settle_refused` on `state == "done"`:
// a settle retried after a lost commit answer is recognised as ours when the
// first settle finished the action, not only when it left it dispatched.
#[tokio::test]
async fn a_final_settle_retried_after_a_lost_commit_answer_is_accepted() {
    let db = fresh_db().await;
    let (lease, _key) = sent_action(&db, &owner("a")).await;
    settled_ok(settle(&db.store, &lease, Status::Delivered, Some("msg_1"), true).await);
    let again = settle(&db.store, &lease, Status::Delivered, Some("msg_1"), true).await;
    assert_eq!(
        again,
        SettleOutcome::Settled(Settled {
            status: Status::Delivered,
            merge: Merge::Same
        })
    );
    assert_eq!(view(&db, lease.action_id).await.state, ActionState::Done);
}

// Kills `replace && with || in PgStore::settle_refused` between the owner and
// the epoch check: an owner that reclaimed its own expired lease holds a new
// epoch, and a settle with its old lease is fenced even though the owner
// name matches and the action is settled.
#[tokio::test]
async fn an_old_lease_is_fenced_after_the_same_owner_reclaimed_the_action() {
    let db = fresh_db().await;
    let a = owner("a");
    let (old, key) = intent_written(&db, &a, SHORT_LEASE_MS).await;
    let new = reclaim(&db, &a, old.action_id).await;
    assert_eq!(new.owner, old.owner);
    assert_eq!(new.epoch, old.epoch + 1);
    assert!(
        !db.store
            .outbox_intent(&new, &key)
            .await
            .unwrap()
            .unwrap()
            .written_now
    );
    settled_ok(settle(&db.store, &new, Status::Accepted, Some("msg_1"), true).await);
    assert_eq!(
        settle(&db.store, &old, Status::Accepted, Some("msg_1"), false).await,
        SettleOutcome::Fenced(Fenced {
            current_epoch: Some(new.epoch)
        })
    );
    no_event_rows_of_its_own(&db).await;
}

// Kills `replace && with || in PgStore::settle_refused` between the epoch and
// the state check: once the new owner has settled (dispatched or done), the
// old owner's settle is still fenced, not mistaken for a retry.
#[tokio::test]
async fn an_old_lease_stays_fenced_after_the_new_owner_settled() {
    let db = fresh_db().await;
    let (old, key) = intent_written(&db, &owner("a"), SHORT_LEASE_MS).await;
    let new = reclaim(&db, &owner("b"), old.action_id).await;
    db.store.outbox_intent(&new, &key).await.unwrap().unwrap();
    settled_ok(settle(&db.store, &new, Status::Accepted, Some("msg_1"), true).await);
    assert_eq!(
        view(&db, old.action_id).await.state,
        ActionState::Dispatched
    );
    let fenced = SettleOutcome::Fenced(Fenced {
        current_epoch: Some(new.epoch),
    });
    assert_eq!(
        settle(&db.store, &old, Status::Accepted, Some("msg_1"), false).await,
        fenced
    );
    // Still fenced once the action is done.
    webhook(&db.store, "evt_final", &key, Status::Delivered).await;
    assert_eq!(view(&db, old.action_id).await.state, ActionState::Done);
    assert_eq!(
        settle(&db.store, &old, Status::Delivered, Some("msg_1"), false).await,
        fenced
    );
    // The old owner's settles changed nothing.
    let v = view(&db, old.action_id).await;
    assert_eq!((v.epoch, v.status), (new.epoch, Some(Status::Delivered)));
    no_event_rows_of_its_own(&db).await;
}

/// A refused write is answered as data, and recorded by its caller (the
/// worker's `observe`), never by the store: one writer of each events row.
async fn no_event_rows_of_its_own(db: &TestDb) {
    let events = db.store.summary(1800).await.unwrap().events;
    assert!(events.is_empty(), "the store wrote events rows: {events:?}");
}

// Pins the other half of `replace != with == in merge_unleased` (now
// `merges_fold`) on the
// conflict comparison, which writes the outbox row even when nothing changed
// (store.rs catches only its first half, a lost conflict flag): a report that
// changes nothing writes nothing, so a stream of repeated conflicting reports
// cannot pull the next reconciling lookup forward again and again.
#[tokio::test]
async fn a_repeated_report_during_a_conflict_does_not_pull_the_lookup_forward() {
    let db = fresh_db().await;
    let (lease, key) = sent_action(&db, &owner("a")).await;
    settled_ok(settle(&db.store, &lease, Status::Accepted, Some("msg_1"), false).await);
    webhook(&db.store, "e1", &key, Status::Delivered).await;
    assert_eq!(
        webhook(&db.store, "e2", &key, Status::Failed).await,
        MergeOutcome::Applied(Merge::Conflict)
    );
    // The conflict is due at once; taking it pushes the next check out.
    assert_eq!(
        db.store.outbox_due_checks(10, 60_000).await.unwrap().len(),
        1
    );
    assert!(db
        .store
        .outbox_due_checks(10, 60_000)
        .await
        .unwrap()
        .is_empty());
    // The same two finals again, under new event ids: nothing changes.
    assert_eq!(
        webhook(&db.store, "e3", &key, Status::Failed).await,
        MergeOutcome::Applied(Merge::Conflict)
    );
    assert_eq!(
        webhook(&db.store, "e4", &key, Status::Delivered).await,
        MergeOutcome::Applied(Merge::Same)
    );
    assert!(
        db.store
            .outbox_due_checks(10, 60_000)
            .await
            .unwrap()
            .is_empty(),
        "a report that changed nothing made the action due again"
    );
    // The first final finished the action; the standing conflict keeps its
    // final status unknown to the verifier until a lookup settles it.
    let v = view(&db, lease.action_id).await;
    assert_eq!(
        (v.state, v.status),
        (ActionState::Done, Some(Status::Delivered))
    );
    assert_eq!(
        db.store.action_outcomes().await.unwrap()[0].final_status,
        None
    );
}
