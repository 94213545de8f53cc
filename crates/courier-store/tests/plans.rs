//! The fair claim's plan does not hang on fresh statistics.
//!
//! Autovacuum analyses a database at most once a minute, so after a burst
//! of one store's actions the planner can work from statistics that say
//! almost nothing is pending. The fair claim then walked the FIFO index
//! (every pending action, in id order) for each store it probed, past the
//! whole burst: in the fairness benchmark index scans then fetched 32-51
//! million rows per 5 s (10,000-20,000 otherwise) until the statistics caught
//! up, and the claims took both CPUs. Since migration 3
//! the FIFO index's predicate is one that only the FIFO claim implies. These
//! tests check the plans in the states a burst passes through, and that the
//! FIFO index as it was is taken in the stale state (so the check can fail).

use courier_store::*;
use courier_testkit::fresh_db;

const QUIET_STORES: usize = 99;

/// A claim's plan, as text lines, for a batch of 7 with a cap of 1, on the
/// database's clock (the time parameter NULL, as in production).
async fn plan(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    let rows = c
        .query(
            &format!("EXPLAIN {sql}"),
            &[&"w", &7i64, &60_000f64, &1i32, &true, &now],
        )
        .await
        .expect("explain the claim");
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

fn uses_fifo_index(plan: &[String]) -> bool {
    plan.iter().any(|l| l.contains("actions_pending_fifo"))
}

async fn setup(c: &tokio_postgres::Client) {
    c.batch_execute(
        "ALTER TABLE actions SET (autovacuum_enabled = off);
         INSERT INTO stores (store)
             SELECT format('store-%s', lpad(i::text, 3, '0')) FROM generate_series(0, 99) i;",
    )
    .await
    .expect("stores");
}

/// `n` actions spread over the quiet stores (store-001 ..), in `state`.
async fn quiet_actions(c: &tokio_postgres::Client, n: i64, state: &str) {
    c.execute(
        "INSERT INTO actions (uid, store, recipient, body, state)
         SELECT gen_random_uuid(), format('store-%s', lpad((1 + i % $2::bigint)::text, 3, '0')),
                '+15551234567', 'quiet', $3
         FROM generate_series(1, $1::bigint) i",
        &[&n, &(QUIET_STORES as i64), &state],
    )
    .await
    .expect("quiet actions");
}

/// A burst of one store's actions in one statement, as a bulk sender does.
async fn burst(c: &tokio_postgres::Client, n: i64) {
    c.execute(
        "INSERT INTO actions (uid, store, recipient, body)
         SELECT gen_random_uuid(), 'store-000', '+15551234567', 'bulk'
         FROM generate_series(1, $1::bigint)",
        &[&n],
    )
    .await
    .expect("burst");
}

#[tokio::test]
async fn fair_claim_keeps_the_per_store_index_after_a_burst_with_stale_statistics() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    setup(&c).await;
    // Statistics taken when nothing was pending...
    quiet_actions(&c, 5_000, "done").await;
    c.batch_execute("ANALYZE actions").await.unwrap();
    // ...then a burst of one store, older than the quiet stores' new work.
    burst(&c, 1_000).await;
    quiet_actions(&c, 20, "pending").await;

    // The FIFO index as it was before migration 3, beside the new one.
    c.batch_execute(
        "CREATE INDEX actions_pending_fifo_by_id ON actions (id) WHERE state = 'pending'",
    )
    .await
    .unwrap();
    let old = plan(&c, claim_statement(ClaimMode::Fair)).await;
    assert!(
        old.iter().any(|l| l.contains("actions_pending_fifo_by_id")),
        "the state this test builds no longer misleads the planner into an id-ordered \
         FIFO index (the check below could not fail); plan:\n{}",
        old.join("\n")
    );
    c.batch_execute("DROP INDEX actions_pending_fifo_by_id")
        .await
        .unwrap();
    let now = plan(&c, claim_statement(ClaimMode::Fair)).await;
    assert!(
        !uses_fifo_index(&now),
        "the fair claim walks the FIFO index:\n{}",
        now.join("\n")
    );
    assert!(
        now.iter().any(|l| l.contains("actions_pending_by_store")),
        "the fair claim does not probe the per-store index:\n{}",
        now.join("\n")
    );

    // And it claims what it should: one action of the bulk store (cap 1)
    // and quiet stores' actions, oldest store turn first.
    let claimed = db
        .store
        .action_claim(&"w".into(), 7, 60_000, 1, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 7);
    assert_eq!(
        claimed.iter().filter(|c| c.store == "store-000").count(),
        1,
        "the bulk store holds one slot (its cap)"
    );
}

#[tokio::test]
async fn fair_claim_keeps_the_per_store_index_without_and_with_fresh_statistics() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    setup(&c).await;
    quiet_actions(&c, 2_000, "done").await;
    burst(&c, 1_000).await;
    quiet_actions(&c, 20, "pending").await;
    // Never analysed (a new database).
    let never = plan(&c, claim_statement(ClaimMode::Fair)).await;
    assert!(!uses_fifo_index(&never), "{}", never.join("\n"));
    // Analysed with the burst pending.
    c.batch_execute("ANALYZE actions").await.unwrap();
    let fresh = plan(&c, claim_statement(ClaimMode::Fair)).await;
    assert!(!uses_fifo_index(&fresh), "{}", fresh.join("\n"));
    // The FIFO claim is the one that should use it.
    let fifo = plan(&c, claim_statement(ClaimMode::Fifo)).await;
    assert!(uses_fifo_index(&fifo), "{}", fifo.join("\n"));
}
