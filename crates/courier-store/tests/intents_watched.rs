//! `intents_watched` holds exactly the intents still awaited (migration
//! 15): open (no final status) or with a check due, with their created_at,
//! openness and next check.
//!
//! The reports of open intents and the reconciler's pick of due checks read
//! only that table, so an intent missing from it would never be looked up
//! (a conflict left unsettled) and would vanish from the age alert. Triggers
//! on `outbox` keep it in the transaction of each change. These tests race
//! intents written at claim, settles (some due at once), webhooks (some
//! conflicting) and the reconciler's picks against the checker
//! (`PgStore::intents_watched_mismatch`); show that the checker catches a
//! trigger disabled on purpose; that the migration's backfill picks up the
//! intents in flight; and that a webhook's merge is now a HOT update of
//! `outbox`.

use courier_core::{action_key, Status};
use courier_store::*;
use courier_testkit::fixtures::{self, new_action, LONG_LEASE_MS};
use courier_testkit::fresh_db;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RACE_FOR: Duration = Duration::from_secs(3);

/// One settle as a batch of one, its next check `final_overdue_ms` away.
async fn settle(s: &PgStore, c: &Claimed, report: Status, final_overdue_ms: u64) {
    let req = SettleReq {
        lease: c.lease.clone(),
        report,
        message_id: Some("m".into()),
        from_lookup: false,
    };
    let answers = s.actions_settle(&[req], final_overdue_ms).await.unwrap();
    assert!(
        matches!(answers[0], Ok(SettleOutcome::Settled(_))),
        "{answers:?}"
    );
}

#[tokio::test]
async fn intents_settles_webhooks_and_lookups_racing_keep_intents_watched_exact() {
    let db = fresh_db().await;
    let store = db.store.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for e in 0..2 {
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
    for w in 0..2 {
        let (s, stop) = (store.clone(), stop.clone());
        tasks.spawn(async move {
            let owner: Arc<str> = Arc::from(format!("w{w}"));
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let got = fixtures::claim_to_send(&s, &owner, 8, LONG_LEASE_MS, 8, ClaimMode::Fair)
                    .await
                    .unwrap();
                for c in &got {
                    n += 1;
                    let key = action_key(&c.uid);
                    match n % 5 {
                        // Left open with the intent written at claim.
                        0 => {}
                        // Accepted, a check due in a minute.
                        1 => settle(&s, c, Status::Accepted, 60_000).await,
                        // Accepted, its check due at once: the reconciler's.
                        2 => settle(&s, c, Status::Accepted, 0).await,
                        // Accepted, then delivered by a webhook.
                        3 => {
                            settle(&s, c, Status::Accepted, 60_000).await;
                            fixtures::webhook(&s, &format!("d-{key}"), &key, Status::Delivered)
                                .await;
                        }
                        // Two final reports that disagree: a conflict, due
                        // for a lookup at once.
                        _ => {
                            settle(&s, c, Status::Delivered, 60_000).await;
                            fixtures::webhook(&s, &format!("f-{key}"), &key, Status::Failed).await;
                        }
                    }
                }
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
    }
    {
        let (s, stop) = (store.clone(), stop.clone());
        tasks.spawn(async move {
            let mut picked = 0usize;
            while !stop.load(Ordering::Relaxed) {
                picked += s.outbox_due_checks(16, 1).await.unwrap().len();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(picked > 0, "the reconciler picked nothing");
        });
    }
    let started = Instant::now();
    let mut checks = 0;
    while started.elapsed() < RACE_FOR {
        let wrong = store.intents_watched_mismatch().await.unwrap();
        assert!(
            wrong.is_empty(),
            "intents_watched disagrees with outbox for {wrong:?}"
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert!(store.intents_watched_mismatch().await.unwrap().is_empty());
    let r = store
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FILTER (WHERE NOT courier_status_is_final(status)),
                    count(*) FILTER (WHERE courier_status_is_final(status) AND NOT conflict),
                    count(*) FILTER (WHERE conflict),
                    count(*) FILTER (WHERE lookups > 0),
                    (SELECT count(*) FROM intents_watched)
             FROM outbox",
            &[],
        )
        .await
        .unwrap();
    let (open, final_, conflict, looked, watched): (i64, i64, i64, i64, i64) =
        (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
    eprintln!(
        "{checks} checks; {open} open, {final_} final, {conflict} in conflict, \
         {looked} picked for a lookup, {watched} watched"
    );
    assert!(
        checks >= 10 && open > 0 && final_ > 0 && conflict > 0 && looked > 0,
        "the race did too little to tell"
    );
    assert!(watched >= open + conflict);
}

/// The control: with the update trigger disabled, a webhook that makes an
/// intent final leaves its row behind; with the insert trigger disabled, a
/// claim's intent gets none. The checker names each.
#[tokio::test]
async fn the_checker_catches_a_disabled_trigger() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    fixtures::enqueued(&db.store, "s1", 3).await;
    let owner: Arc<str> = Arc::from("w");
    let got = fixtures::claim_to_send(&db.store, &owner, 2, LONG_LEASE_MS, 10, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    settle(&db.store, &got[0], Status::Accepted, 60_000).await;
    assert!(db
        .store
        .intents_watched_mismatch()
        .await
        .unwrap()
        .is_empty());

    c.batch_execute("ALTER TABLE outbox DISABLE TRIGGER outbox_watched_update")
        .await
        .unwrap();
    let key = action_key(&got[0].uid);
    fixtures::webhook(&db.store, "e1", &key, Status::Delivered).await;
    assert_eq!(
        db.store.intents_watched_mismatch().await.unwrap(),
        vec![got[0].lease.action_id]
    );
    c.batch_execute(
        "ALTER TABLE outbox ENABLE TRIGGER outbox_watched_update;
         DELETE FROM intents_watched WHERE action_id IN (SELECT action_id FROM outbox
                                                        WHERE courier_status_is_final(status));
         ALTER TABLE outbox DISABLE TRIGGER outbox_watched_insert",
    )
    .await
    .unwrap();
    assert!(db
        .store
        .intents_watched_mismatch()
        .await
        .unwrap()
        .is_empty());
    let third = fixtures::claim_to_send(&db.store, &owner, 1, LONG_LEASE_MS, 10, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(third.len(), 1);
    assert_eq!(
        db.store.intents_watched_mismatch().await.unwrap(),
        vec![third[0].lease.action_id]
    );
}

/// Migrations 15 and 16 applied to a database with intents open, due and
/// final list exactly the open and due ones, and drop the two partial
/// indexes of `outbox`.
#[tokio::test]
async fn migrations_15_and_16_backfill_the_intents_in_flight() {
    let db = fresh_db().await;
    let mut c = db.raw_client().await;
    fixtures::enqueued(&db.store, "s1", 4).await;
    let owner: Arc<str> = Arc::from("w");
    let got = fixtures::claim_to_send(&db.store, &owner, 4, LONG_LEASE_MS, 10, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 4);
    // Back to version 14: no table, no triggers, the partial indexes back.
    c.batch_execute(
        "DROP TRIGGER outbox_watched_insert ON outbox;
         DROP TRIGGER outbox_watched_update ON outbox;
         DROP TRIGGER outbox_watched_delete ON outbox;
         DROP FUNCTION courier_watched_insert(), courier_watched_update(),
                       courier_watched_delete();
         DROP TABLE intents_watched CASCADE;
         CREATE INDEX outbox_next_check ON outbox (next_check_at) WHERE next_check_at IS NOT NULL;
         CREATE INDEX outbox_open ON outbox (created_at)
             WHERE status NOT IN ('delivered', 'failed');
         ALTER TABLE outbox RESET (fillfactor);
         DELETE FROM schema_migrations WHERE version IN (15, 16)",
    )
    .await
    .unwrap();
    // As version 14's statements would leave them: 0 open (sending), 1
    // accepted with a check, 2 delivered, 3 delivered in conflict.
    let ids: Vec<i64> = got.iter().map(|g| g.lease.action_id).collect();
    c.execute(
        "UPDATE outbox SET
            status = CASE WHEN action_id = $1 THEN 'sending'
                          WHEN action_id = $2 THEN 'accepted' ELSE 'delivered' END,
            accepted_at = CASE WHEN action_id <> $1 THEN now() END,
            final_at = CASE WHEN action_id IN ($3, $4) THEN now() END,
            conflict = action_id = $4,
            next_check_at = CASE WHEN action_id IN ($2, $4) THEN now() END",
        &[&ids[0], &ids[1], &ids[2], &ids[3]],
    )
    .await
    .unwrap();
    assert_eq!(migrate::run(&mut c).await.unwrap(), 2);
    assert!(db
        .store
        .intents_watched_mismatch()
        .await
        .unwrap()
        .is_empty());
    let watched: Vec<(i64, bool)> = c
        .query(
            "SELECT action_id, open FROM intents_watched ORDER BY action_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        watched,
        vec![(ids[0], true), (ids[1], true), (ids[3], false)]
    );
    let due = db.store.outbox_due_checks(10, 60_000).await.unwrap();
    let mut due: Vec<i64> = due.iter().map(|d| d.action_id).collect();
    due.sort_unstable();
    // The accepted one's action is still claimed (not dispatched): only the
    // conflict is due for a lookup.
    assert_eq!(due, vec![ids[3]]);
    let row = c
        .query_one(
            "SELECT (SELECT count(*) FROM pg_indexes
                     WHERE indexname IN ('outbox_open', 'outbox_next_check')),
                    (SELECT reloptions::text FROM pg_class WHERE relname = 'outbox')",
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

/// A webhook's merge of a final status is a HOT update of `outbox` (no new
/// index entry) when the page has room: what migrations 15 and 16 are for.
/// The control puts the partial index on `next_check_at` back, and the
/// same merges are not HOT.
#[tokio::test]
async fn webhook_merges_are_hot_updates_of_outbox() {
    // Few enough that every version of their rows fits in one page: HOT
    // then needs no pruning, which a busy machine's snapshots may delay.
    const N: usize = 10;
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    let one = db.one_connection().await;
    async fn merges_hot(db: &courier_testkit::TestDb, one: &PgStore, s: &str) -> (i64, i64) {
        let got = fixtures::claimed_to_send(one, s, N).await;
        for g in &got {
            settle(one, g, Status::Accepted, 60_000).await;
        }
        let before = db.updates_of(one, "outbox").await;
        let ids_before = db.updates_of(one, "webhook_events").await;
        for g in &got {
            let key = action_key(&g.uid);
            fixtures::webhook(one, &format!("evt-{key}"), &key, Status::Delivered).await;
        }
        let after = db.updates_of(one, "outbox").await;
        // Each event id is inserted with its outcome, never updated: an
        // update of a row its own transaction inserted is not HOT.
        assert_eq!(db.updates_of(one, "webhook_events").await, ids_before);
        (after.0 - before.0, after.1 - before.1)
    }
    let (updated, hot) = merges_hot(&db, &one, "s1").await;
    eprintln!("{hot} of {updated} merges' updates of outbox were HOT");
    assert_eq!(updated, N as i64, "a merge per webhook");
    assert!(hot * 10 >= updated * 9, "{hot} of {updated} were HOT");

    c.batch_execute(
        "CREATE INDEX outbox_next_check ON outbox (next_check_at) WHERE next_check_at IS NOT NULL",
    )
    .await
    .unwrap();
    let (updated, hot) = merges_hot(&db, &one, "s2").await;
    eprintln!("with the index on next_check_at: {hot} of {updated} were HOT");
    assert_eq!(updated, N as i64);
    assert!(
        hot * 10 < updated,
        "{hot} of {updated} were HOT with the index"
    );
}

/// The trigger's statements reach `intents_watched` by key (migration 17),
/// even with a plan the session made while the table was small: a settle
/// and a webhook after the table grew start no sequential scan of it. The
/// control runs the same steps with the function's setting turned on (not
/// merely reset: it would then take the settle's own, which turns
/// sequential scans off too), and the plan made when the table was small
/// scans it.
#[tokio::test]
async fn trigger_statements_reach_intents_watched_by_key_even_when_planned_small() {
    async fn scans(by_key: bool) -> i64 {
        let db = fresh_db().await;
        let raw = db.raw_client().await;
        raw.batch_execute("ALTER TABLE intents_watched SET (autovacuum_enabled = off)")
            .await
            .unwrap();
        if !by_key {
            raw.batch_execute("ALTER FUNCTION courier_watched_update() SET enable_seqscan = on")
                .await
                .unwrap();
        }
        let one = db.one_connection().await;
        fixtures::enqueued(&one, "s1", 2).await;
        let owner: Arc<str> = Arc::from("w");
        let got = fixtures::claim_to_send(&one, &owner, 2, LONG_LEASE_MS, 10, ClaimMode::Fair)
            .await
            .unwrap();
        assert_eq!(got.len(), 2);
        // Analysed and planned now, with two rows in the table (as
        // autovacuum leaves it after a quiet minute).
        raw.batch_execute("ANALYZE intents_watched").await.unwrap();
        settle(&one, &got[0], Status::Accepted, 60_000).await;
        // The table grows to 5,000 open intents (no new statistics).
        raw.batch_execute(
            "INSERT INTO stores (store) VALUES ('big') ON CONFLICT DO NOTHING;
             WITH a AS (
                 INSERT INTO actions (uid, store, recipient, body, state, epoch)
                 SELECT gen_random_uuid(), 'big', '+15551234567', 'x', 'dispatched', 1
                 FROM generate_series(1, 5000)
                 RETURNING id)
             INSERT INTO outbox (action_id, idem_key, epoch_written, status, attempts)
             SELECT id, 'big-' || id, 1, 'accepted', 1 FROM a",
        )
        .await
        .unwrap();
        let before = db.seq_scans_of(&one, "intents_watched").await;
        settle(&one, &got[1], Status::Accepted, 60_000).await;
        let key = action_key(&got[0].uid);
        fixtures::webhook(&one, "e1", &key, Status::Delivered).await;
        let scans = db.seq_scans_of(&one, "intents_watched").await - before;
        assert!(one.intents_watched_mismatch().await.unwrap().is_empty());
        scans
    }
    let by_key = scans(true).await;
    let control = scans(false).await;
    eprintln!("sequential scans of intents_watched: {by_key}; with the setting on: {control}");
    assert_eq!(by_key, 0);
    assert!(
        control > 0,
        "the control's plan did not scan: the test shows nothing"
    );
}
