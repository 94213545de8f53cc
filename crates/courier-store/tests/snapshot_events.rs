//! The dashboard's newest events of a kind cost the rows shown, wherever the
//! newest event of that kind lies: a common kind whose newest events are far
//! behind a burst of another kind (the history benchmark's shape: 1,000,000
//! `backward` events, then 500,000 `duplicate_webhook`) must not walk the
//! burst.

use courier_store::{SnapshotQuery, EVENTS_NEWEST_OF_KIND};
use courier_testkit::{explain_buffers, fresh_db};

const OLD_KIND: i64 = 30_000;
const BURST: i64 = 20_000;

async fn seed(c: &tokio_postgres::Client) {
    c.batch_execute(&format!(
        "INSERT INTO events (kind, action_id, detail)
         SELECT 'backward', g, 'old' FROM generate_series(1, {OLD_KIND}) g;
         INSERT INTO events (kind, action_id, detail)
         SELECT 'duplicate_webhook', g, 'burst' FROM generate_series(1, {BURST}) g"
    ))
    .await
    .unwrap();
    // Apart: a multi-statement batch is one transaction, and VACUUM (which
    // sets the visibility map, as autovacuum does for an insert-only table)
    // runs outside any.
    c.batch_execute("VACUUM ANALYZE events").await.unwrap();
}

#[tokio::test]
async fn the_newest_events_of_a_kind_behind_a_burst_cost_the_rows_shown() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    seed(&c).await;
    let q = SnapshotQuery {
        stores_max: 10,
        owners_max: 10,
        intents_max: 10,
        events_max: 20,
        event_kinds: vec!["backward".into()],
        intent_alert_s: 60,
        lease_ttl_ms: 10_000,
    };
    let snap = db.store.ops_snapshot(&q).await.unwrap();
    let ids: Vec<i64> = snap.events.iter().map(|e| e.id).collect();
    let newest: Vec<i64> = c
        .query(
            "SELECT id FROM events WHERE kind = 'backward' ORDER BY id DESC LIMIT 20",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, newest);
    assert!(snap.events.iter().all(|e| e.kind == "backward"));

    let stmt = EVENTS_NEWEST_OF_KIND
        .replace("$1", "'backward'")
        .replace("$2", "20");
    let (read, plan) = explain_buffers(&c, &stmt).await;
    assert!(read < 200, "{read} buffers:\n{plan}");
    assert!(plan.contains("using events_kind_id"), "{plan}");
    // The negative control: the rows of the kind asked for directly walk
    // the primary key back through the burst.
    let (control, plan) = explain_buffers(
        &c,
        "SELECT * FROM events WHERE kind = 'backward' ORDER BY id DESC LIMIT 20",
    )
    .await;
    assert!(control > 10 * read.max(1), "{control} buffers:\n{plan}");
}
