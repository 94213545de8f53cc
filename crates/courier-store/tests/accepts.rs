//! `outbox_accepts` holds the recent acceptances (migration 19): one row
//! for each outbox row given its `accepted_at`, written by a trigger in the
//! settle's transaction, walked by the dashboard's sampler
//! (`PgStore::accepted_latencies`) and trimmed to [`ACCEPTS_KEEP_S`] by the
//! pruner's fold.
//!
//! These tests show that every acceptance is walked once, and a trigger
//! disabled on purpose is caught; that the trim removes only what is older
//! than its window; and that a settle is now a HOT update of `outbox`, and
//! is not with the index `outbox_accepted` put back (the control).

use courier_core::{action_key, Status};
use courier_store::*;
use courier_testkit::fixtures;
use courier_testkit::fresh_db;
use std::collections::BTreeSet;

/// Claims `n` actions of store `s` and settles them: every third stays
/// open, the others are accepted (and every other one of those delivered by
/// a webhook afterwards, which accepts nothing anew). Answers the ids
/// settled.
async fn some_settled(store: &PgStore, s: &str, n: usize) -> BTreeSet<i64> {
    let got = fixtures::claimed_to_send(store, s, n).await;
    let mut settled = BTreeSet::new();
    for (i, c) in got.iter().enumerate() {
        if i % 3 == 0 {
            continue;
        }
        let out = fixtures::settle(store, &c.lease, Status::Accepted, Some("m"), false).await;
        assert!(matches!(out, SettleOutcome::Settled(_)), "{out:?}");
        if i % 2 == 0 {
            let key = action_key(&c.uid);
            fixtures::webhook(store, &format!("evt-{key}"), &key, Status::Delivered).await;
        }
        settled.insert(c.lease.action_id);
    }
    settled
}

/// Every action the sampler's walk finds, in pages of 3, from the start.
async fn walked(store: &PgStore) -> Vec<i64> {
    let c = store.client().await.unwrap();
    // The walk reads acceptances older than the settle lag: age them.
    c.batch_execute("UPDATE outbox_accepts SET accepted_at = accepted_at - interval '10 seconds'")
        .await
        .unwrap();
    let mut cursor = AcceptedCursor {
        accepted_at: chrono::DateTime::UNIX_EPOCH,
        action_id: 0,
    };
    let mut ids = Vec::new();
    for _ in 0..100 {
        let page = store.accepted_latencies(cursor, 3).await.unwrap();
        if page.latencies_s.is_empty() {
            return ids;
        }
        assert!(page.latencies_s.iter().all(|s| *s >= 0.0), "{page:?}");
        let got: Vec<i64> = c
            .query(
                "SELECT action_id FROM outbox_accepts
                 WHERE (accepted_at, action_id) > ($1, $2) AND (accepted_at, action_id) <= ($3, $4)
                 ORDER BY accepted_at, action_id",
                &[
                    &cursor.accepted_at,
                    &cursor.action_id,
                    &page.next.accepted_at,
                    &page.next.action_id,
                ],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(got.len(), page.latencies_s.len());
        ids.extend(got);
        cursor = page.next;
    }
    panic!("the walk did not end");
}

#[tokio::test]
async fn every_acceptance_is_walked_once_and_a_disabled_trigger_is_caught() {
    let db = fresh_db().await;
    let settled = some_settled(&db.store, "s1", 12).await;
    let ids = walked(&db.store).await;
    let once: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(once.len(), ids.len(), "an acceptance walked twice: {ids:?}");
    assert_eq!(once, settled, "the walk is not the accepted actions");

    // The control: with the trigger off, acceptances go missing, and the
    // same comparison catches it.
    let db = fresh_db().await;
    db.raw_client()
        .await
        .batch_execute("ALTER TABLE outbox DISABLE TRIGGER outbox_accepts_update")
        .await
        .unwrap();
    let settled = some_settled(&db.store, "s1", 12).await;
    let once: BTreeSet<i64> = walked(&db.store).await.into_iter().collect();
    assert!(!settled.is_empty());
    assert_ne!(once, settled, "the control went unnoticed");
    assert!(once.is_empty(), "{once:?}");
}

#[tokio::test]
async fn the_trim_removes_only_acceptances_older_than_its_window() {
    let db = fresh_db().await;
    let settled = some_settled(&db.store, "s1", 12).await;
    let c = db.store.client().await.unwrap();
    let keep = ACCEPTS_KEEP_S as f64;
    // The first half of the acceptances, in order, just outside the window;
    // the rest just inside it.
    let old: Vec<i64> = settled.iter().copied().take(settled.len() / 2).collect();
    c.execute(
        "UPDATE outbox_accepts SET accepted_at = now() - ($2::float8 + 5) * interval '1 second'
         WHERE action_id = ANY($1)",
        &[&old, &keep],
    )
    .await
    .unwrap();
    c.execute(
        "UPDATE outbox_accepts SET accepted_at = now() - ($2::float8 - 5) * interval '1 second'
         WHERE NOT action_id = ANY($1)",
        &[&old, &keep],
    )
    .await
    .unwrap();
    // Batches of 2: bounded, so it takes several.
    let mut removed = 0;
    for _ in 0..old.len() {
        removed += db
            .store
            .accepts_trim(2, ACCEPTS_KEEP_S)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(removed as usize, old.len());
    let left: BTreeSet<i64> = c
        .query("SELECT action_id FROM outbox_accepts", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let want: BTreeSet<i64> = settled
        .difference(&old.iter().copied().collect())
        .copied()
        .collect();
    assert_eq!(left, want);
    assert_eq!(
        db.store.accepts_trim(100, ACCEPTS_KEEP_S).await.unwrap(),
        Some(0)
    );
}

/// A settle is a HOT update of `outbox` when the page has room: no index of
/// `outbox` names a column it writes (migrations 15, 16, 19 and 20). The
/// control puts the index `outbox_accepted` back, and the same settles are
/// not HOT.
#[tokio::test]
async fn settles_are_hot_updates_of_outbox() {
    // Few enough that every version of their rows fits in one page.
    const N: usize = 10;
    let db = fresh_db().await;
    let one = db.one_connection().await;
    async fn settles_hot(db: &courier_testkit::TestDb, one: &PgStore, s: &str) -> (i64, i64) {
        let got = fixtures::claimed_to_send(one, s, N).await;
        let before = db.updates_of(one, "outbox").await;
        for c in &got {
            let out = fixtures::settle(one, &c.lease, Status::Accepted, Some("m"), false).await;
            assert!(matches!(out, SettleOutcome::Settled(_)), "{out:?}");
        }
        let after = db.updates_of(one, "outbox").await;
        (after.0 - before.0, after.1 - before.1)
    }
    let (updated, hot) = settles_hot(&db, &one, "s1").await;
    eprintln!("{hot} of {updated} settles' updates of outbox were HOT");
    assert_eq!(updated, N as i64, "a settle per action");
    assert!(hot * 10 >= updated * 9, "{hot} of {updated} were HOT");

    db.raw_client()
        .await
        .batch_execute(
            "CREATE INDEX outbox_accepted ON outbox (accepted_at, action_id)
             WHERE accepted_at IS NOT NULL",
        )
        .await
        .unwrap();
    let (updated, hot) = settles_hot(&db, &one, "s2").await;
    eprintln!("with the index on accepted_at: {hot} of {updated} were HOT");
    assert_eq!(updated, N as i64);
    assert!(
        hot * 10 < updated,
        "{hot} of {updated} were HOT with the index"
    );
}
