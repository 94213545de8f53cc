//! The store's locking invariant (see the crate docs, src/lib.rs) under the
//! interleaving that deadlocks without it.
//!
//! A settle locks its action row (claimed), then its outbox row; a merge
//! locks the outbox row, then finishes the action only if it is dispatched.
//! Here a webhook merge takes the outbox row first and is held there (a
//! second transaction holds its event id, uncommitted), the owner's settle
//! then locks the action row and waits for the outbox row, and the merge is
//! let go. Because a merge never writes (so never waits for) a claimed action
//! row, both finish. With the invariant broken on purpose (merges that lock
//! their action rows whatever their state), the same interleaving is a cycle,
//! and PostgreSQL's deadlock detector aborts one of the two: the test shows
//! both, so its check can fail.

use courier_core::Status;
use courier_store::*;
use courier_testkit::fixtures::{self, MESSAGE_ID};
use courier_testkit::fresh_db;

type Answers = (
    Result<SettleOutcome, StoreError>,
    Result<MergeOutcome, StoreError>,
);

/// Runs the interleaving on one fresh sent action; the settle's and the
/// merge's answers.
async fn merge_first_then_settle(store: &PgStore) -> Answers {
    fixtures::enqueued(store, "s1", 1).await;
    let held = fixtures::sent(store).await;
    // Holds the webhook's event id, uncommitted: the merge stops at its
    // insert, after it has locked the outbox row.
    let mut blocker = store.client().await.unwrap();
    let hold = blocker.transaction().await.unwrap();
    hold.execute(
        "INSERT INTO webhook_events (event_id, idem_key, status, outcome)
         VALUES ('e1', $1, 'delivered', 'pending')",
        &[&held.key],
    )
    .await
    .unwrap();
    let merge = {
        let store = store.clone();
        let event = WebhookIn {
            event_id: "e1".into(),
            key: held.key.clone(),
            status: Status::Delivered,
            message_id: MESSAGE_ID.into(),
        };
        tokio::spawn(async move { store.webhooks_merge(&[event]).await })
    };
    fixtures::until_waiting_for_locks(store, 1).await;
    let settle = {
        let store = store.clone();
        let req = SettleReq {
            lease: held.lease.clone(),
            report: Status::Accepted,
            message_id: Some(MESSAGE_ID.into()),
            from_lookup: false,
        };
        tokio::spawn(async move { store.actions_settle(&[req], 60_000).await })
    };
    // The settle holds the action row and waits for the outbox row.
    fixtures::until_waiting_for_locks(store, 2).await;
    hold.rollback().await.unwrap();
    let settled = settle
        .await
        .unwrap()
        .map(|mut v| v.remove(0))
        .and_then(|r| r);
    let merged = merge
        .await
        .unwrap()
        .map(|mut v| v.remove(0))
        .and_then(|r| r);
    (settled, merged)
}

fn is_deadlock<T>(r: &Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Unavailable(e)) if e.contains("40P01"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merge_and_a_settle_of_one_action_do_not_deadlock() {
    let db = fresh_db().await;
    let (settled, merged) = merge_first_then_settle(&db.store).await;
    // The merge went first: the settle folds its report over the delivered
    // status the webhook wrote (accepted is behind it) and finishes the action.
    assert_eq!(
        merged.unwrap(),
        MergeOutcome::Applied(courier_core::Merge::Advance(Status::Delivered))
    );
    assert_eq!(
        settled.unwrap(),
        SettleOutcome::Settled(Settled {
            status: Status::Delivered,
            merge: courier_core::Merge::Backward
        })
    );

    // The negative control: the same interleaving with merges that lock
    // claimed action rows is a cycle, which PostgreSQL breaks by aborting one.
    let db = fresh_db().await;
    let broken = db.store.with_merges_locking_claimed_actions();
    let (settled, merged) = merge_first_then_settle(&broken).await;
    assert!(
        is_deadlock(&settled) || is_deadlock(&merged),
        "no deadlock with the invariant broken: settle {settled:?}, merge {merged:?}"
    );
}
