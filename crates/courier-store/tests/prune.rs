//! Retention against a real PostgreSQL: what a prune batch removes, and each
//! thing it refuses to remove (an action that is not final, an intent whose
//! key the provider may still replay, an intent in conflict, a webhook event
//! id or an event inside its window), with time moved by the store's manual
//! clock instead of waited for. Then the maintained counts (migration 6)
//! against `count(*)`, with a negative control, and the migration runner.

use courier_core::{Limits, Retention, Status};
use courier_store::*;
use courier_testkit::fixtures::{self, enqueued, webhook};
use courier_testkit::fresh_db;
use std::time::Duration;

/// Windows short enough to move the clock past: actions 600 s, the
/// provider's keys 300 s, event ids 120 s, events 60 s.
fn windows() -> PruneWindows {
    PruneWindows {
        action_retention_s: 600,
        key_retention_s: 300,
        webhook_event_retention_s: 120,
        event_retention_s: 60,
        batch_rows_max: 1_000,
    }
}

/// Enqueues one action and claims it with its intent written.
async fn claimed(store: &PgStore) -> fixtures::Held {
    enqueued(store, "s1", 1).await;
    fixtures::claimed(store).await
}

/// Enqueues one action and settles it: dispatched, status accepted.
async fn dispatched(store: &PgStore) -> fixtures::Held {
    enqueued(store, "s1", 1).await;
    fixtures::settled(store).await
}

/// A finished action (delivered, by webhook `evt-<tag>`); its key.
async fn done(store: &PgStore, tag: &str) -> fixtures::Held {
    let held = dispatched(store).await;
    let out = webhook(store, &format!("evt-{tag}"), &held.key, Status::Delivered).await;
    assert!(matches!(out, MergeOutcome::Applied(_)), "{out:?}");
    held
}

async fn exists(store: &PgStore, id: i64) -> bool {
    store.action_get(id).await.unwrap().is_some()
}

async fn prune(store: &PgStore, w: &PruneWindows) -> Pruned {
    store
        .prune_batch(w)
        .await
        .unwrap()
        .expect("nobody else prunes")
}

#[tokio::test]
async fn prune_never_removes_an_action_that_is_not_final() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let finished = done(&store, "a").await;
    let dispatched = dispatched(&store).await;
    let claimed = claimed(&store).await;
    let pending = enqueued(&store, "s1", 1).await[0];
    let p = prune(&store, &windows()).await;
    assert_eq!((p.actions, p.outbox), (0, 0), "nothing is old yet: {p:?}");
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    let p = prune(&store, &windows()).await;
    assert_eq!((p.actions, p.outbox), (1, 1), "{p:?}");
    assert!(!exists(&store, finished.lease.action_id).await);
    for id in [dispatched.lease.action_id, claimed.lease.action_id, pending] {
        assert!(
            exists(&store, id).await,
            "action {id} was not final and went"
        );
    }
    // Once it is final (finished now, on this clock), it goes when the
    // action retention has passed since.
    let out = webhook(&store, "evt-d", &dispatched.key, Status::Failed).await;
    assert!(matches!(out, MergeOutcome::Applied(_)), "{out:?}");
    assert_eq!(prune(&store, &windows()).await.actions, 0, "just finished");
    clock.advance(Duration::from_secs(windows().action_retention_s + 1));
    assert_eq!(prune(&store, &windows()).await.actions, 1);
    assert!(!exists(&store, dispatched.lease.action_id).await);
}

#[tokio::test]
async fn prune_keeps_an_intent_whose_key_the_provider_may_still_replay() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    // Windows that do not outlast the key retention: validation refuses
    // them, and the statement refuses to act on them anyway.
    let short = PruneWindows {
        action_retention_s: 60,
        ..windows()
    };
    let limits = Limits {
        key_retention_s: short.key_retention_s,
        ..Limits::default()
    };
    let r = Retention {
        action_retention_s: short.action_retention_s,
        webhook_retry_horizon_s: 30,
        webhook_event_retention_s: 120,
        ..Retention::default()
    };
    assert!(r.validate(&limits).unwrap_err().0.contains("key retention"));
    let held = done(&store, "a").await;
    clock.advance(Duration::from_secs(120));
    let p = prune(&store, &short).await;
    assert_eq!(
        (p.actions, p.outbox),
        (0, 0),
        "inside the key retention: {p:?}"
    );
    assert!(exists(&store, held.lease.action_id).await);
    clock.advance(Duration::from_secs(200));
    let p = prune(&store, &short).await;
    assert_eq!(
        (p.actions, p.outbox),
        (1, 1),
        "past the key retention: {p:?}"
    );
}

#[tokio::test]
async fn prune_keeps_an_intent_in_conflict_until_a_lookup_settles_it() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let held = done(&store, "a").await;
    let out = webhook(&store, "evt-b", &held.key, Status::Failed).await;
    assert_eq!(out, MergeOutcome::Applied(courier_core::Merge::Conflict));
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    assert_eq!(prune(&store, &windows()).await.actions, 0);
    assert!(exists(&store, held.lease.action_id).await);
    // The lookup's final word settles it; then it goes.
    store
        .lookup_merge(&held.key, Status::Failed, fixtures::MESSAGE_ID)
        .await
        .unwrap();
    assert_eq!(prune(&store, &windows()).await.actions, 1);
}

#[tokio::test]
async fn prune_keeps_webhook_event_ids_and_events_inside_their_windows() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let held = done(&store, "a").await;
    store.event_record("fenced", None, "test").await.unwrap();
    let w = windows();
    clock.advance(Duration::from_secs(50));
    let p = prune(&store, &w).await;
    assert_eq!((p.webhook_events, p.events), (0, 0), "{p:?}");
    clock.advance(Duration::from_secs(20)); // 70 s: past the events' 60 s
    let p = prune(&store, &w).await;
    assert_eq!((p.webhook_events, p.events), (0, 1), "{p:?}");
    // Inside its window a repeated event id is still a duplicate.
    let again = webhook(&store, "evt-a", &held.key, Status::Delivered).await;
    assert_eq!(again, MergeOutcome::Duplicate);
    clock.advance(Duration::from_secs(60)); // 130 s: past the ids' 120 s
    let p = prune(&store, &w).await;
    assert_eq!(p.webhook_events, 1, "{p:?}");
    assert_eq!(p.actions, 0, "the action's own window is 600 s");
}

#[tokio::test]
async fn a_batch_is_bounded_and_a_second_pruner_skips_its_turn() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    for i in 0..5 {
        done(&store, &i.to_string()).await;
    }
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    let w = PruneWindows {
        batch_rows_max: 2,
        ..windows()
    };
    // Another process holds the pruner's lock: this one removes nothing.
    let other = db.store.client().await.unwrap();
    other
        .execute("SELECT pg_advisory_lock($1)", &[&PRUNE_LOCK_ID])
        .await
        .unwrap();
    assert_eq!(store.prune_batch(&w).await.unwrap(), None);
    assert_eq!(store.counts_fold().await.unwrap(), None);
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&PRUNE_LOCK_ID])
        .await
        .unwrap();
    let mut removed = Vec::new();
    for _ in 0..3 {
        let p = prune(&store, &w).await;
        removed.push(p.actions);
    }
    assert_eq!(removed, vec![2, 2, 1]);
}

/// Exact counts by scanning, to compare with the maintained ones.
async fn scanned(store: &PgStore) -> Vec<(String, i64)> {
    let c = store.client().await.unwrap();
    let rows = c
        .query(
            "SELECT 'actions.' || state, count(*) FROM actions GROUP BY state
             UNION ALL SELECT 'outbox.' || status, count(*) FROM outbox GROUP BY status
             UNION ALL SELECT 'outbox.attempts', sum(attempts)::bigint FROM outbox HAVING count(*) > 0
             UNION ALL SELECT 'outbox.lookups', sum(lookups)::bigint FROM outbox HAVING count(*) > 0
             UNION ALL SELECT 'events.' || kind, count(*) FROM events GROUP BY kind
             UNION ALL SELECT 'stores', count(*) FROM stores",
            &[],
        )
        .await
        .unwrap();
    let mut v: Vec<(String, i64)> = rows
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .filter(|(_, n)| *n != 0)
        .collect();
    v.sort();
    v
}

async fn maintained(store: &PgStore) -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = store
        .counts()
        .await
        .unwrap()
        .0
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn the_maintained_counts_equal_count_star_through_work_prunes_and_folds() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    for i in 0..3 {
        done(&store, &i.to_string()).await;
    }
    enqueued(&store, "s1", 1).await;
    let failed = fixtures::sent(&store).await;
    store
        .action_fail(&failed.lease, 400, "rejected")
        .await
        .unwrap()
        .unwrap();
    dispatched(&store).await;
    claimed(&store).await;
    enqueued(&store, "s2", 4).await;
    store.event_record("fenced", None, "x").await.unwrap();
    assert_eq!(maintained(&store).await, scanned(&store).await);
    assert!(store.counts_fold().await.unwrap().unwrap() > 0);
    assert_eq!(maintained(&store).await, scanned(&store).await);
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    assert_eq!(prune(&store, &windows()).await.actions, 4);
    assert_eq!(maintained(&store).await, scanned(&store).await);
    store.counts_fold().await.unwrap().unwrap();
    assert_eq!(maintained(&store).await, scanned(&store).await);
    let s = store.summary(1_800).await.unwrap();
    assert_eq!(s.state("pending"), 4);
    assert_eq!(s.state("done"), 0);

    // Negative control: a write the triggers do not see is caught.
    let c = store.client().await.unwrap();
    c.batch_execute("ALTER TABLE actions DISABLE TRIGGER actions_count_insert")
        .await
        .unwrap();
    enqueued(&store, "s3", 1).await;
    assert_ne!(maintained(&store).await, scanned(&store).await);
}

#[tokio::test]
async fn the_runner_builds_indexes_concurrently_and_repeats_a_cut_short_migration() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    assert!(migrate::status(&c).await.unwrap().is_current());
    // Migration 7 cut short after its first index: not recorded, one index
    // left behind. Running again repeats it from the top.
    c.batch_execute(
        "DELETE FROM schema_migrations WHERE version = 7;
         DROP INDEX IF EXISTS outbox_accepted; DROP INDEX events_kind_id;
         CREATE INDEX events_kind ON events (kind);",
    )
    .await
    .unwrap();
    let s = migrate::status(&c).await.unwrap();
    assert_eq!(s.missing, vec![7]);
    let e = migrate::check(&c).await.unwrap_err().to_string();
    assert!(e.contains("courier db migrate"), "{e}");
    assert_eq!(db.store.migrate().await.unwrap(), 1);
    let indexes: Vec<(String, bool)> = c
        .query(
            "SELECT i.relname::text, x.indisvalid FROM pg_index x
             JOIN pg_class i ON i.oid = x.indexrelid
             WHERE i.relname IN ('actions_finished', 'webhook_events_received',
                                 'outbox_accepted', 'events_kind_id', 'events_kind')
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let want: Vec<(String, bool)> = [
        "actions_finished",
        "events_kind_id",
        "outbox_accepted",
        "webhook_events_received",
    ]
    .iter()
    .map(|n| (n.to_string(), true))
    .collect();
    assert_eq!(indexes, want);
    assert!(migrate::status(&c).await.unwrap().is_current());
    // A schema newer than this binary knows is refused with its reason.
    c.execute(
        "INSERT INTO schema_migrations (version, name) VALUES (999, 'future')",
        &[],
    )
    .await
    .unwrap();
    let e = db.store.schema_check().await.unwrap_err().to_string();
    assert!(e.contains("[999]") && e.contains("newer courier"), "{e}");
}

#[tokio::test]
async fn a_batch_waits_for_no_row_another_transaction_holds() {
    // A merge holding a finished intent's row does not make a batch wait:
    // the batch passes it over (SKIP LOCKED) and takes it next time.
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let held = done(&store, "a").await;
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    let mut c = db.store.client().await.unwrap();
    let tx = c.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM outbox WHERE idem_key = $1 FOR UPDATE",
        &[&held.key],
    )
    .await
    .unwrap();
    let p = tokio::time::timeout(Duration::from_secs(5), prune(&store, &windows()))
        .await
        .expect("the batch did not wait for the held row");
    assert_eq!(p.actions, 0);
    tx.rollback().await.unwrap();
    assert_eq!(prune(&store, &windows()).await.actions, 1);
}
