//! Open intents in the reports: how many are open comes from the maintained
//! counts, and how many are past the age alert is counted by a walk of the
//! oldest that stops at `INTENTS_PAST_ALERT_COUNTED_MAX`, so neither read
//! costs in proportion to the open intents (a backlog of webhooks) or to the
//! dead index entries that settled intents leave behind. Both walk
//! `intents_watched` (migration 15), the intents still awaited.

use courier_store::{SnapshotQuery, INTENTS_PAST_ALERT_COUNTED_MAX};
use courier_testkit::fresh_db;

/// `n` intents open (`accepted`) since `age_s` seconds ago, with their
/// actions, written by SQL (the counts' triggers see them like any write).
async fn open_intents(c: &tokio_postgres::Client, n: i64, age_s: f64) {
    c.execute(
        "INSERT INTO stores (store) VALUES ('s1') ON CONFLICT DO NOTHING",
        &[],
    )
    .await
    .unwrap();
    c.execute(
        "WITH a AS (
             INSERT INTO actions (uid, store, recipient, body, state, epoch)
             SELECT gen_random_uuid(), 's1', '+15551234567', 'x', 'dispatched', 1
             FROM generate_series(1, $1::bigint)
             RETURNING id)
         INSERT INTO outbox (action_id, idem_key, epoch_written, status, attempts, created_at)
         SELECT id, 'k-' || id, 1, 'accepted', 1, now() - $2 * interval '1 second' FROM a",
        &[&n, &age_s],
    )
    .await
    .unwrap();
}

fn query(alert_s: u64) -> SnapshotQuery {
    SnapshotQuery {
        stores_max: 10,
        owners_max: 10,
        intents_max: 5,
        events_max: 10,
        event_kinds: vec![],
        intent_alert_s: alert_s,
        lease_ttl_ms: 10_000,
    }
}

#[tokio::test]
async fn the_count_past_the_alert_is_exact_below_its_cap_and_stops_at_it() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    open_intents(&c, 3, 3_600.0).await;
    open_intents(&c, 2, 0.0).await;
    assert_eq!(db.store.intents_older_than(60).await.unwrap(), 3);
    let summary = db.store.summary(60).await.unwrap();
    assert_eq!(summary.intents_older_than_alert, 3);
    assert!(summary.oldest_open_intent_s.unwrap() >= 3_599.0);
    let snap = db.store.ops_snapshot(&query(60)).await.unwrap();
    assert_eq!((snap.open_intents, snap.intents_older_than_alert), (5, 3));
    assert_eq!(snap.oldest_intents.len(), 5);

    // Past the cap the count stops there; the open count stays exact.
    open_intents(&c, INTENTS_PAST_ALERT_COUNTED_MAX, 7_200.0).await;
    assert_eq!(
        db.store.intents_older_than(60).await.unwrap(),
        INTENTS_PAST_ALERT_COUNTED_MAX
    );
    let summary = db.store.summary(60).await.unwrap();
    assert_eq!(
        summary.intents_older_than_alert,
        INTENTS_PAST_ALERT_COUNTED_MAX
    );
    assert!(summary.oldest_open_intent_s.unwrap() >= 7_199.0);
    let snap = db.store.ops_snapshot(&query(60)).await.unwrap();
    assert_eq!(snap.open_intents, INTENTS_PAST_ALERT_COUNTED_MAX + 5);
    assert_eq!(
        snap.intents_older_than_alert,
        INTENTS_PAST_ALERT_COUNTED_MAX
    );
    let scanned: i64 = c
        .query_one(
            "SELECT count(*) FROM outbox WHERE NOT courier_status_is_final(status)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(snap.open_intents, scanned, "the maintained count is exact");
}

/// The walk is an index (or index-only) scan of `intents_watched_open` under a limit, with the
/// statistics as they are after the intents were written (none) and after
/// an analyse: the function's own body, planned under its own settings (read
/// back from `pg_proc`). The same body under the default settings is the
/// negative control: with the statistics from before the intents were
/// written it gets the bitmap scan, which visits every open intent and every
/// dead entry, and marks none of them dead.
#[tokio::test]
async fn the_count_past_the_alert_walks_the_open_index_under_a_limit() {
    let db = fresh_db().await;
    let mut c = db.store.client().await.unwrap();
    open_intents(&c, 20_000, 3_600.0).await;
    let row = c
        .query_one(
            "SELECT prosrc, proconfig FROM pg_proc WHERE proname = 'courier_open_intents_past'",
            &[],
        )
        .await
        .unwrap();
    let body = row
        .get::<_, String>(0)
        .replace("age_s", "60")
        .replace("counted_max", "10000");
    let settings: Vec<String> = row.get(1);
    assert_eq!(
        settings,
        vec![
            "enable_bitmapscan=off".to_string(),
            "enable_seqscan=off".to_string(),
            "jit=off".to_string()
        ]
    );
    let mut control_walks = Vec::new();
    for analysed in [false, true] {
        if analysed {
            c.batch_execute("ANALYZE intents_watched").await.unwrap();
        }
        for own_settings in [true, false] {
            let tx = c.transaction().await.unwrap();
            if own_settings {
                for s in &settings {
                    let (k, v) = s.split_once('=').unwrap();
                    tx.batch_execute(&format!("SET LOCAL {k} = {v}"))
                        .await
                        .unwrap();
                }
            }
            let plan: Vec<String> = tx
                .query(&format!("EXPLAIN {body}"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            tx.rollback().await.unwrap();
            let plan = plan.join("\n");
            let walk = plan.contains("Limit")
                // An index scan or an index-only one: both walk in order
                // and mark dead entries.
                && plan.contains("Scan using intents_watched_open")
                && !plan.contains("Bitmap");
            if own_settings {
                assert!(walk, "analysed {analysed}, own settings:\n{plan}");
            } else {
                control_walks.push((analysed, walk, plan));
            }
        }
    }
    // Statistics from before the intents were written (the usual case: a
    // backlog builds faster than autovacuum analyses) get the bitmap scan.
    assert!(
        control_walks.iter().any(|(_, walk, _)| !walk),
        "{control_walks:#?}"
    );
}
