//! What scheduled actions cost the claims and the schedule's tick: with
//! 200,000 actions scheduled for tomorrow, a fair claim reads what it read
//! without them, and a tick with nothing due reads a handful of pages. The
//! control: a walk of the scheduled actions through `actions` (what a claim
//! that filtered on `not_before` would do) reads them all, so the measure
//! can tell.

use courier_store::*;
use courier_testkit::fresh_db;

const SCHEDULED: i64 = 200_000;

/// The shared buffers a statement touched (its plan's top node), in a
/// transaction rolled back.
async fn buffers(
    c: &mut tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> u64 {
    let tx = c.transaction().await.unwrap();
    let rows = tx
        .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), params)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let line = rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .find(|l| l.trim_start().starts_with("Buffers:"))
        .expect("a Buffers line");
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter(|(k, _)| matches!(*k, "hit" | "read"))
        .filter_map(|(_, v)| v.trim_end_matches(',').parse::<u64>().ok())
        .sum()
}

async fn claim_buffers(c: &mut tokio_postgres::Client) -> u64 {
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&"w", &16i64, &60_000f64, &4i32, &true, &now, &None::<&str>];
    buffers(c, claim_statement(ClaimMode::Fair), &params).await
}

/// A database with today's work (20 stores with 10 pending actions each)
/// and `SCHEDULED` more actions in 500 other stores, all in `state`
/// (`scheduled` for tomorrow, or `cancelled`: the same rows, which no claim
/// or tick has any business reading).
async fn with_200k(state: &str) -> (courier_testkit::TestDb, tokio_postgres::Client) {
    let db = fresh_db().await;
    let c = db.raw_client().await;
    c.batch_execute(&format!(
        "SELECT courier.enqueue_many(
             array(SELECT 's' || (g % 20) FROM generate_series(1, 200) g),
             array(SELECT '+15551234567' FROM generate_series(1, 200) g),
             array(SELECT 'today ' || g FROM generate_series(1, 200) g));
         INSERT INTO stores (store) SELECT 't' || g FROM generate_series(0, 499) g;
         INSERT INTO actions (uid, store, recipient, body, state, not_before, done_at)
         SELECT gen_random_uuid(), 't' || (g % 500), '+15551234567', 'tomorrow ' || g,
                '{state}', now() + interval '1 day' + g * interval '1 millisecond',
                CASE WHEN '{state}' = 'cancelled' THEN now() END
         FROM generate_series(1, {SCHEDULED}) g"
    ))
    .await
    .unwrap();
    c.batch_execute("VACUUM ANALYZE").await.unwrap();
    (db, c)
}

#[tokio::test]
async fn actions_scheduled_for_tomorrow_cost_todays_claims_and_ticks_nothing() {
    let (_cancelled_db, mut cancelled) = with_200k("cancelled").await;
    let (_db, mut c) = with_200k("scheduled").await;
    let scheduled: i64 = c
        .query_one("SELECT count(*) FROM actions_scheduled", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(scheduled, SCHEDULED);
    let baseline = claim_buffers(&mut cancelled).await;
    let claim = claim_buffers(&mut c).await;
    let tick = buffers(&mut c, "SELECT courier.promote_due(1000)", &[]).await;
    let expire = buffers(&mut c, "SELECT courier.expire_due(1000)", &[]).await;
    let walk = buffers(
        &mut c,
        "SELECT id FROM actions WHERE state = 'scheduled' AND not_before <= now() LIMIT 16",
        &[],
    )
    .await;
    eprintln!(
        "{SCHEDULED} actions scheduled for tomorrow: fair claim {claim} buffers \
         ({baseline} with them cancelled instead); promote_due {tick}, expire_due {expire}; \
         the walk through actions {walk}"
    );
    assert!(
        walk > SCHEDULED as u64 / 100,
        "the control read only {walk} buffers: this measure cannot tell"
    );
    assert!(
        claim <= baseline + baseline / 10 + 10,
        "the fair claim read {claim} buffers with the actions scheduled, {baseline} with them cancelled"
    );
    assert!(tick < 50, "a tick with nothing due read {tick} buffers");
    assert!(
        expire < 50,
        "an expiry tick with nothing due read {expire} buffers"
    );
    let promoted: i32 = c
        .query_one("SELECT courier.promote_due(1000)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(promoted, 0);
}
