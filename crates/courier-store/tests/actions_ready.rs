//! `actions_ready` holds exactly the pending actions (migration 12);
//! `actions_held` exactly the claimed ones with their leases, and
//! `actions_done` exactly the finished ones (migration 13).
//!
//! The claims find pending work only there, so an action pending without a
//! row would never be claimed, and a row left behind would be walked (and
//! re-checked) by every claim of its store. Triggers on `actions` keep the
//! table in the transaction of each change. These tests check it under
//! concurrent enqueues, fair and FIFO claims and settles, with the checker
//! (`PgStore::actions_ready_mismatch`) run while they race; that the checker
//! catches a trigger disabled on purpose; and that the migration's backfill
//! picks up the actions already pending. The race also heartbeats, fails,
//! finishes (by a final settle and by a webhook) and reclaims, and the
//! checker of migration 13 (`PgStore::actions_side_mismatch`) runs with the
//! first.

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
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let got = fixtures::claim_to_send(&s, &owner, 8, LONG_LEASE_MS, 4, mode)
                    .await
                    .unwrap();
                // Every action moves on a different way: settled (left
                // dispatched), settled and then finished by a webhook,
                // finished by its settle, failed, or kept and heartbeated.
                // They leave 'claimed', and free their stores' slots.
                let mut kept = Vec::new();
                for c in &got {
                    n += 1;
                    match n % 5 {
                        0 => {
                            fixtures::settle(&s, &c.lease, Status::Accepted, Some("m"), false)
                                .await;
                        }
                        1 => {
                            fixtures::settle(&s, &c.lease, Status::Accepted, Some("m"), false)
                                .await;
                            let key = courier_core::action_key(&c.uid);
                            fixtures::webhook(&s, &format!("evt-{key}"), &key, Status::Delivered)
                                .await;
                        }
                        2 => {
                            fixtures::settle(&s, &c.lease, Status::Delivered, Some("m"), false)
                                .await;
                        }
                        3 => s
                            .action_fail(&c.lease, 400, "refused")
                            .await
                            .unwrap()
                            .unwrap(),
                        _ => kept.push((c.lease.action_id, c.lease.epoch)),
                    }
                }
                if !kept.is_empty() {
                    s.action_heartbeat(&owner, &kept, LONG_LEASE_MS)
                        .await
                        .unwrap();
                }
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
    }
    // An owner whose leases run out at once: the others' claims reclaim its
    // actions (a new owner and epoch in actions_held).
    {
        let (s, stop) = (store.clone(), stop.clone());
        tasks.spawn(async move {
            let owner: Arc<str> = Arc::from("short");
            while !stop.load(Ordering::Relaxed) {
                fixtures::claim_to_send(&s, &owner, 2, 1, 4, ClaimMode::Fair)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
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
        let wrong = store.actions_side_mismatch().await.unwrap();
        assert!(
            wrong.is_empty(),
            "actions_held or actions_done disagrees with actions for {wrong:?}"
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert!(store.actions_ready_mismatch().await.unwrap().is_empty());
    assert!(store.actions_side_mismatch().await.unwrap().is_empty());
    let counts = store
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'pending'),
                    count(*) FILTER (WHERE state <> 'pending'),
                    count(*) FILTER (WHERE state = 'claimed'),
                    count(*) FILTER (WHERE state = 'done'),
                    count(*) FILTER (WHERE state = 'failed'),
                    count(*) FILTER (WHERE epoch > 1),
                    (SELECT count(*) FROM actions_held),
                    (SELECT count(*) FROM actions_done)
             FROM actions",
            &[],
        )
        .await
        .unwrap();
    let (pending, claimed): (i64, i64) = (counts.get(0), counts.get(1));
    let (held, done, failed, reclaimed): (i64, i64, i64, i64) =
        (counts.get(2), counts.get(3), counts.get(4), counts.get(5));
    eprintln!(
        "{checks} checks; {pending} pending and {claimed} claimed or settled at the end; \
         {held} held, {done} done, {failed} failed, {reclaimed} reclaimed"
    );
    assert!(
        checks >= 10 && claimed > 0 && held > 0 && done > 0 && failed > 0 && reclaimed > 0,
        "the race did too little to tell"
    );
    assert_eq!(ready_count(&store).await, pending);
    assert_eq!(counts.get::<_, i64>(6), held);
    assert_eq!(counts.get::<_, i64>(7), done + failed);
}

/// The control of migration 13's checker: with the update trigger disabled,
/// a settle that finishes an action leaves its lease behind and writes no
/// finished row; with the delete trigger disabled, a deleted action's
/// finished row stays. The checker names each.
#[tokio::test]
async fn the_side_checker_catches_a_disabled_trigger() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    fixtures::enqueued(&db.store, "s1", 3).await;
    let owner: Arc<str> = Arc::from("w");
    let got = fixtures::claim_to_send(&db.store, &owner, 3, LONG_LEASE_MS, 10, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 3);
    fixtures::settle(
        &db.store,
        &got[0].lease,
        Status::Delivered,
        Some("m"),
        false,
    )
    .await;
    assert!(db.store.actions_side_mismatch().await.unwrap().is_empty());

    c.batch_execute("ALTER TABLE actions DISABLE TRIGGER actions_held_done_update")
        .await
        .unwrap();
    let id = got[1].lease.action_id;
    fixtures::settle(
        &db.store,
        &got[1].lease,
        Status::Delivered,
        Some("m"),
        false,
    )
    .await;
    assert_eq!(
        db.store.actions_side_mismatch().await.unwrap(),
        vec![
            ("actions_done".to_string(), id),
            ("actions_held".to_string(), id)
        ]
    );
    c.batch_execute(
        "ALTER TABLE actions ENABLE TRIGGER actions_held_done_update;
         ALTER TABLE actions DISABLE TRIGGER actions_held_done_delete",
    )
    .await
    .unwrap();
    c.execute(
        "WITH o AS (DELETE FROM outbox WHERE action_id = $1)
         DELETE FROM actions WHERE id = $1",
        &[&got[0].lease.action_id],
    )
    .await
    .unwrap();
    let wrong = db.store.actions_side_mismatch().await.unwrap();
    assert!(
        wrong.contains(&("actions_done".to_string(), got[0].lease.action_id)),
        "{wrong:?}"
    );
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
    let got = fixtures::claim(
        &db.store,
        &"w".into(),
        2,
        LONG_LEASE_MS,
        10,
        ClaimMode::Fair,
    )
    .await
    .unwrap();
    assert_eq!(got.len(), 2);
    let mut taken: Vec<i64> = got.iter().map(|g| g.lease.action_id).collect();
    taken.sort_unstable();
    assert_eq!(db.store.actions_ready_mismatch().await.unwrap(), taken);
    // The claims re-check the state, so the rows left behind are not taken
    // again: the next claim gets only the third action.
    let next = fixtures::claim(
        &db.store,
        &"w".into(),
        8,
        LONG_LEASE_MS,
        10,
        ClaimMode::Fair,
    )
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
    let mut c = db.raw_client().await;
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
    // What version 23 adds to the table version 12 made (the checker reads it).
    c.batch_execute("ALTER TABLE actions_ready ADD COLUMN expires_at timestamptz")
        .await
        .unwrap();
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

/// Migrations 13 and 14 applied to a database with actions already claimed
/// and finished list exactly those, drop the two partial indexes of
/// `actions`, and leave a fifth of each new page free.
#[tokio::test]
async fn migrations_13_and_14_backfill_the_held_and_finished_actions() {
    let db = fresh_db().await;
    let mut c = db.raw_client().await;
    // Back to version 12: no tables, no triggers, the partial indexes back.
    c.batch_execute(
        "DROP TRIGGER actions_held_done_insert ON actions;
         DROP TRIGGER actions_held_done_update ON actions;
         DROP TRIGGER actions_held_done_delete ON actions;
         DROP FUNCTION courier_held_done_insert(), courier_held_done_update(),
                       courier_held_done_delete();
         DROP TABLE actions_held, actions_done;
         CREATE INDEX actions_lease ON actions (lease_until) WHERE state = 'claimed';
         CREATE INDEX actions_finished ON actions (done_at) WHERE state IN ('done', 'failed');
         ALTER TABLE actions RESET (fillfactor);
         DELETE FROM schema_migrations WHERE version IN (13, 14)",
    )
    .await
    .unwrap();
    // Written as version 12's statements would leave them (this binary's
    // claims read actions_held).
    let ids = fixtures::enqueued(&db.store, "s1", 4).await;
    c.execute(
        "UPDATE actions SET state = 'claimed', owner = 'w', epoch = 1,
                lease_until = now() + interval '1 minute', claimed_at = now()
         WHERE id = ANY ($1)",
        &[&ids],
    )
    .await
    .unwrap();
    c.execute(
        "UPDATE actions SET state = CASE WHEN id = $1 THEN 'done' ELSE 'failed' END,
                lease_until = NULL, done_at = now()
         WHERE id IN ($1, $2)",
        &[&ids[0], &ids[1]],
    )
    .await
    .unwrap();
    fixtures::enqueued(&db.store, "s2", 1).await;
    assert_eq!(migrate::run(&mut c).await.unwrap(), 2);
    assert!(db.store.actions_side_mismatch().await.unwrap().is_empty());
    let held: Vec<i64> = c
        .query("SELECT id FROM actions_held ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(held, ids[2..].to_vec());
    let done: Vec<i64> = c
        .query("SELECT id FROM actions_done ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(done, ids[..2].to_vec());
    let row = c
        .query_one(
            "SELECT (SELECT count(*) FROM pg_indexes
                     WHERE indexname IN ('actions_lease', 'actions_finished')),
                    (SELECT reloptions::text FROM pg_class WHERE relname = 'actions')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        0,
        "the partial indexes are still there"
    );
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some("{fillfactor=80}")
    );
}

/// A claim, a heartbeat, a settle and a finishing webhook are HOT updates
/// of `actions` (no new index entry) when the page has room: what
/// migrations 13 and 14 are for. The control puts a partial index naming
/// `state` back, and the same steps are not HOT.
#[tokio::test]
async fn state_changes_of_actions_are_hot_updates() {
    // Few enough that every version of their rows fits in one page: HOT
    // then needs no pruning, which a busy machine's snapshots may delay.
    const N: usize = 6;
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    let one = db.one_connection().await;
    async fn hot_share(db: &courier_testkit::TestDb, one: &PgStore, s: &str) -> (i64, i64) {
        fixtures::enqueued(one, s, N).await;
        let before = db.updates_of(one, "actions").await;
        let owner: Arc<str> = Arc::from("w");
        let got =
            fixtures::claim_to_send(one, &owner, N as u32, LONG_LEASE_MS, 20, ClaimMode::Fair)
                .await
                .unwrap();
        assert_eq!(got.len(), N);
        let held: Vec<(i64, i64)> = got
            .iter()
            .map(|g| (g.lease.action_id, g.lease.epoch))
            .collect();
        one.action_heartbeat(&owner, &held, LONG_LEASE_MS)
            .await
            .unwrap();
        for g in &got {
            fixtures::settle(one, &g.lease, Status::Accepted, Some("m"), false).await;
            let key = courier_core::action_key(&g.uid);
            fixtures::webhook(one, &format!("evt-{key}"), &key, Status::Delivered).await;
        }
        let after = db.updates_of(one, "actions").await;
        (after.0 - before.0, after.1 - before.1)
    }
    let (updated, hot) = hot_share(&db, &one, "s1").await;
    eprintln!("{hot} of {updated} updates of actions were HOT");
    assert_eq!(
        updated,
        4 * N as i64,
        "a claim, heartbeat, settle and webhook each"
    );
    assert!(
        hot * 10 >= updated * 9,
        "{hot} of {updated} updates were HOT"
    );

    c.batch_execute("CREATE INDEX actions_lease ON actions (lease_until) WHERE state = 'claimed'")
        .await
        .unwrap();
    let (updated, hot) = hot_share(&db, &one, "s2").await;
    eprintln!("with a partial index on state: {hot} of {updated} updates were HOT");
    assert_eq!(updated, 4 * N as i64);
    assert!(
        hot * 10 < updated,
        "{hot} of {updated} updates were HOT with the index"
    );
}
