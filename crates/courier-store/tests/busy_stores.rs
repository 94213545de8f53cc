//! The busiest stores in `courier status` and the dashboard are found among
//! the stores with work, so their cost does not follow the stores
//! registered: a million mostly idle stores must not be read at every
//! dashboard sample.

use courier_store::{SnapshotQuery, SUMMARY_STORES_MAX};
use courier_testkit::{explain_buffers, fresh_db};

const IDLE: u32 = 20_000;

#[tokio::test]
async fn the_busiest_stores_are_found_among_the_stores_with_work() {
    let db = fresh_db().await;
    db.store.stores_seed_idle("idle", IDLE).await.unwrap();
    // Work: 3 pending in "b-busy", 1 in "a-less", 1 claimed of "c-held".
    db.store
        .actions_enqueue_bulk(&["b-busy".to_string()], 3)
        .await
        .unwrap();
    db.store
        .actions_enqueue_bulk(&["a-less".to_string(), "c-held".to_string()], 2)
        .await
        .unwrap();
    let c = db.store.client().await.unwrap();
    c.execute(
        "UPDATE actions SET state = 'claimed', owner = 'w', epoch = 1,
                lease_until = now() + interval '1 minute'
         WHERE store = 'c-held'",
        &[],
    )
    .await
    .unwrap();
    c.execute(
        "UPDATE stores SET in_flight = 1 WHERE store = 'c-held'",
        &[],
    )
    .await
    .unwrap();
    c.batch_execute("ANALYZE").await.unwrap();

    let q = SnapshotQuery {
        stores_max: 10,
        owners_max: 10,
        intents_max: 10,
        events_max: 10,
        event_kinds: vec![],
        intent_alert_s: 60,
        lease_ttl_ms: 10_000,
    };
    let snap = db.store.ops_snapshot(&q).await.unwrap();
    let listed: Vec<(String, i64, i32)> = snap
        .stores
        .iter()
        .map(|s| (s.store.clone(), s.pending, s.in_flight))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("b-busy".to_string(), 3, 0),
            ("a-less".to_string(), 1, 0),
            ("c-held".to_string(), 0, 1),
        ]
    );
    assert_eq!(snap.stores_total, i64::from(IDLE) + 3);
    let summary = db.store.summary(60).await.unwrap();
    let listed: Vec<&str> = summary.stores.iter().map(|s| s.store.as_str()).collect();
    assert_eq!(listed, ["b-busy", "a-less", "c-held"]);
    const { assert!(SUMMARY_STORES_MAX >= 3) };

    let stmt = include_str!("../sql/report/store_backlog.sql")
        .replace("$1", "10")
        .replace("$2", "NULL");
    let (read, plan) = explain_buffers(&c, &stmt).await;
    assert!(read < 200, "{read} buffers:\n{plan}");
    // The negative control: the list over every store row, as it was.
    let (control, plan) = explain_buffers(
        &c,
        "SELECT s.store, s.in_flight FROM store_in_flight s
         ORDER BY s.in_flight DESC, s.store LIMIT 10",
    )
    .await;
    assert!(control > 5 * read.max(1), "{control} buffers:\n{plan}");
}
