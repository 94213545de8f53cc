//! Time comes in: the settle, the fail, the merge, the reconciler's pick
//! and the reports read the time from the store's `Clock`, as the lease
//! statements do, so a test moves a manual clock instead of waiting. Each
//! test starts the clock a day away from the database's, so a statement
//! that still read `now()` would show.

use chrono::{DateTime, Utc};
use courier_core::Status;
use courier_store::*;
use courier_testkit::fixtures::{self, FINAL_OVERDUE_MS};
use courier_testkit::{fresh_db, TestDb};
use std::time::Duration;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The store on a manual clock a day ahead of the database's.
async fn a_day_ahead(db: &TestDb) -> (PgStore, Clock) {
    let (store, clock) = db.manual_clock().await;
    clock.advance(DAY);
    (store, clock)
}

async fn at(store: &PgStore, sql: &str) -> DateTime<Utc> {
    let got: Vec<Option<DateTime<Utc>>> = fixtures::column(store, sql).await;
    got[0].unwrap_or_else(|| panic!("no time from {sql}"))
}

#[tokio::test]
async fn settles_and_merges_write_the_clocks_time() {
    let db = fresh_db().await;
    let (store, clock) = a_day_ahead(&db).await;
    fixtures::enqueued(&store, "s1", 1).await;
    let held = fixtures::settled(&store).await;
    let id = held.lease.action_id;
    let now = clock.now().unwrap();
    let q =
        |col: &str, table: &str, key: &str| format!("SELECT {col} FROM {table} WHERE {key} = {id}");
    assert_eq!(at(&store, &q("dispatched_at", "actions", "id")).await, now);
    assert_eq!(
        at(&store, &q("accepted_at", "outbox", "action_id")).await,
        now
    );
    assert_eq!(
        at(&store, &q("next_check_at", "outbox", "action_id")).await,
        now + chrono::Duration::milliseconds(FINAL_OVERDUE_MS as i64)
    );

    clock.advance(Duration::from_secs(5));
    let out = fixtures::webhook(&store, "evt-1", &held.key, Status::Delivered).await;
    assert!(matches!(out, MergeOutcome::Applied(_)), "{out:?}");
    let now = clock.now().unwrap();
    assert_eq!(at(&store, &q("done_at", "actions", "id")).await, now);
    assert_eq!(at(&store, &q("final_at", "outbox", "action_id")).await, now);
}

#[tokio::test]
async fn a_fail_writes_the_clocks_time() {
    let db = fresh_db().await;
    let (store, clock) = a_day_ahead(&db).await;
    fixtures::enqueued(&store, "s1", 1).await;
    let held = fixtures::claimed(&store).await;
    store
        .action_fail(&held.lease, 400, "refused")
        .await
        .unwrap()
        .unwrap();
    let id = held.lease.action_id;
    let done = at(
        &store,
        &format!("SELECT done_at FROM actions WHERE id = {id}"),
    )
    .await;
    assert_eq!(done, clock.now().unwrap());
}

#[tokio::test]
async fn the_reconcilers_pick_waits_for_the_clock_not_the_database() {
    let db = fresh_db().await;
    let (store, clock) = a_day_ahead(&db).await;
    fixtures::enqueued(&store, "s1", 1).await;
    let held = fixtures::settled(&store).await;
    // A day ahead of the database, the check is not due until the clock
    // passes the final-overdue time.
    assert!(store
        .outbox_due_checks(10, 60_000)
        .await
        .unwrap()
        .is_empty());
    clock.advance(Duration::from_millis(FINAL_OVERDUE_MS + 1));
    let due = store.outbox_due_checks(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].key, held.key);
    assert!(
        store
            .outbox_due_checks(10, 60_000)
            .await
            .unwrap()
            .is_empty(),
        "the pick pushed the next check out"
    );
}

#[tokio::test]
async fn the_reports_measure_ages_and_leases_on_the_clock() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    fixtures::enqueued(&store, "s1", 2).await;
    fixtures::claimed_as(&store, "w", 1_000).await;
    assert_eq!(
        store.owners_holding().await.unwrap(),
        [("w".to_string(), 1)]
    );
    assert_eq!(store.intents_older_than(3_600).await.unwrap(), 0);

    clock.advance(Duration::from_secs(2 * 3600));
    assert!(
        store.owners_holding().await.unwrap().is_empty(),
        "the lease ran out on the clock"
    );
    assert_eq!(store.intents_older_than(3_600).await.unwrap(), 1);
    let summary = store.summary(3_600).await.unwrap();
    assert_eq!(summary.intents_older_than_alert, 1);
    let oldest = summary.oldest_open_intent_s.unwrap();
    // The intent was written by the database's clock, which the manual
    // one started from a moment before.
    assert!((7_140.0..7_260.0).contains(&oldest), "{oldest}");
}
