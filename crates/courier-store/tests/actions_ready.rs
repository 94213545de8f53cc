//! `actions_ready` holds exactly the pending actions (migration 12).
//!
//! The claims find pending work only there, so an action pending without a
//! row would never be claimed, and a row left behind would be walked (and
//! re-checked) by every claim of its store. Triggers on `actions` keep the
//! table in the transaction of each change. These tests check it under
//! concurrent enqueues, fair and FIFO claims and settles, with the checker
//! (`PgStore::actions_ready_mismatch`) run while they race; that the checker
//! catches a trigger disabled on purpose; and that the migration's backfill
//! picks up the actions already pending.

use courier_core::Status;
use courier_store::*;
use courier_testkit::fixtures::{self, new_action, LONG_LEASE_MS};
use courier_testkit::fresh_db;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RACE_FOR: Duration = Duration::from_secs(3);

async fn ready_count(store: &PgStore) -> i64 {
    store
        .client()
        .await
        .unwrap()
        .query_one("SELECT count(*) FROM actions_ready", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn enqueues_claims_and_settles_racing_keep_actions_ready_exact() {
    let db = fresh_db().await;
    let store = db.store.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for e in 0..3 {
        let (s, stop) = (store.clone(), stop.clone());
        tasks.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                s.action_enqueue(&new_action(&format!("s{}", n % 5), e * 1_000_000 + n))
                    .await
                    .unwrap();
                n += 1;
            }
        });
    }
    for w in 0..3 {
        let (s, stop) = (store.clone(), stop.clone());
        tasks.spawn(async move {
            let owner: Arc<str> = Arc::from(format!("w{w}"));
            let mode = if w == 0 {
                ClaimMode::Fifo
            } else {
                ClaimMode::Fair
            };
            while !stop.load(Ordering::Relaxed) {
                let got = s
                    .action_claim_to_send(&owner, 8, LONG_LEASE_MS, 4, mode)
                    .await
                    .unwrap();
                // Settle every other one: they move on from 'claimed', and
                // free their stores' slots.
                for c in got.iter().step_by(2) {
                    fixtures::settle(&s, &c.lease, Status::Accepted, Some("m"), false).await;
                }
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
    }
    let started = Instant::now();
    let mut checks = 0;
    while started.elapsed() < RACE_FOR {
        let wrong = store.actions_ready_mismatch().await.unwrap();
        assert!(
            wrong.is_empty(),
            "actions_ready disagrees with actions for {wrong:?}"
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert!(store.actions_ready_mismatch().await.unwrap().is_empty());
    let counts = store
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'pending'),
                    count(*) FILTER (WHERE state <> 'pending')
             FROM actions",
            &[],
        )
        .await
        .unwrap();
    let (pending, claimed): (i64, i64) = (counts.get(0), counts.get(1));
    eprintln!("{checks} checks; {pending} pending and {claimed} claimed or settled at the end");
    assert!(
        checks >= 10 && claimed > 0,
        "the race did too little to tell"
    );
    assert_eq!(ready_count(&store).await, pending);
}

/// The control: with the update trigger disabled, a claim leaves its
/// actions' rows behind, and with the insert trigger disabled an enqueue
/// adds none; the checker names both.
#[tokio::test]
async fn the_checker_catches_a_disabled_trigger() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    let ids = fixtures::enqueued(&db.store, "s1", 3).await;
    assert!(db.store.actions_ready_mismatch().await.unwrap().is_empty());

    c.batch_execute("ALTER TABLE actions DISABLE TRIGGER actions_ready_update")
        .await
        .unwrap();
    let got = db
        .store
        .action_claim(&"w".into(), 2, LONG_LEASE_MS, 10, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    let mut taken: Vec<i64> = got.iter().map(|g| g.lease.action_id).collect();
    taken.sort_unstable();
    assert_eq!(db.store.actions_ready_mismatch().await.unwrap(), taken);
    // The claims re-check the state, so the rows left behind are not taken
    // again: the next claim gets only the third action.
    let next = db
        .store
        .action_claim(&"w".into(), 8, LONG_LEASE_MS, 10, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|g| g.lease.action_id).collect::<Vec<_>>(),
        vec![ids[2]]
    );
    c.batch_execute(
        "ALTER TABLE actions ENABLE TRIGGER actions_ready_update;
         DELETE FROM actions_ready;
         ALTER TABLE actions DISABLE TRIGGER actions_ready_insert",
    )
    .await
    .unwrap();
    assert!(db.store.actions_ready_mismatch().await.unwrap().is_empty());
    let new = fixtures::enqueued(&db.store, "s1", 1).await;
    assert_eq!(db.store.actions_ready_mismatch().await.unwrap(), new);
}

/// Migration 12 applied to a database with actions already pending (and
/// some claimed) lists exactly the pending ones.
#[tokio::test]
async fn the_migration_backfills_the_pending_actions() {
    let db = fresh_db().await;
    let mut c = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .map(|(c, conn)| {
            tokio::spawn(conn);
            c
        })
        .unwrap();
    // Back to version 11: no table, no triggers, the partial index back.
    c.batch_execute(
        "DROP TRIGGER actions_ready_insert ON actions;
         DROP TRIGGER actions_ready_update ON actions;
         DROP TRIGGER actions_ready_delete ON actions;
         DROP FUNCTION courier_ready_insert(), courier_ready_update(), courier_ready_delete();
         DROP TABLE actions_ready;
         CREATE INDEX actions_pending_by_store ON actions (store, id) WHERE state = 'pending';
         DELETE FROM schema_migrations WHERE version = 12",
    )
    .await
    .unwrap();
    let pending = fixtures::enqueued(&db.store, "s1", 5).await;
    let more = fixtures::enqueued(&db.store, "s2", 2).await;
    c.execute(
        "UPDATE actions SET state = 'claimed', owner = 'w', epoch = 1,
                lease_until = now() + interval '1 minute', claimed_at = now()
         WHERE id = ANY ($1)",
        &[&vec![pending[0], pending[1]]],
    )
    .await
    .unwrap();
    assert_eq!(migrate::run(&mut c).await.unwrap(), 1);
    assert!(db.store.actions_ready_mismatch().await.unwrap().is_empty());
    let mut listed: Vec<i64> = c
        .query("SELECT id FROM actions_ready ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    listed.sort_unstable();
    let mut expected: Vec<i64> = pending[2..].iter().chain(&more).copied().collect();
    expected.sort_unstable();
    assert_eq!(listed, expected);
    let gone: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'actions_pending%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        gone, 0,
        "the partial indexes of pending actions are still there"
    );
}
