//! The statements that read the side tables of migrations 13 and 15 never
//! scan the history.
//!
//! The reclaim (`actions_held`), the pruner (`actions_done`), the
//! reconciler's pick of due checks and the open-intents report
//! (`intents_watched`) each reach `actions` and `outbox` only by key, one
//! row per candidate. Their plans are checked in the states a burst passes
//! through: statistics never taken, taken while nothing was in flight (then
//! a burst of expired leases and due checks: stale), and fresh. The
//! negative control is the reclaim as it read before migration 13 (expired
//! leases found in `actions` itself), which, without the partial index
//! `actions_lease`, scans the table: the check catches it.

use courier_store::*;
use courier_testkit::fresh_db;

const HISTORY: i64 = 20_000;
const BURST: i64 = 300;

const DUE_CHECKS: &str = include_str!("../sql/outbox/due_checks.sql");
const PRUNE: &str = include_str!("../sql/prune/actions.sql");
const OPEN_INTENTS: &str = include_str!("../sql/report/open_intents.sql");
const OWNERS: &str = include_str!("../sql/report/owners_holding.sql");
/// The reclaim before migration 13 (the control).
const RECLAIM_BEFORE_13: &str = "SELECT id FROM actions
    WHERE state = 'claimed' AND lease_until < now()
    ORDER BY lease_until LIMIT $1 FOR UPDATE SKIP LOCKED";

/// `HISTORY` finished actions with their delivered intents.
async fn history(c: &tokio_postgres::Client) {
    c.batch_execute(&format!(
        "ALTER TABLE actions SET (autovacuum_enabled = off);
         ALTER TABLE outbox SET (autovacuum_enabled = off);
         INSERT INTO stores (store) VALUES ('s1');
         WITH a AS (
             INSERT INTO actions (uid, store, recipient, body, state, epoch, done_at)
             SELECT gen_random_uuid(), 's1', '+15551234567', 'old', 'done', 1,
                    now() - interval '1 hour'
             FROM generate_series(1, {HISTORY})
             RETURNING id, done_at)
         INSERT INTO outbox (action_id, idem_key, epoch_written, status, attempts,
                             created_at, accepted_at, final_at)
         SELECT id, 'h-' || id, 1, 'delivered', 1, done_at, done_at, done_at FROM a;"
    ))
    .await
    .expect("history");
}

/// `BURST` claimed actions whose leases ran out, and as many intents in
/// conflict (a lookup due at once), written as the statements write them
/// (the triggers fill the side tables).
async fn burst(c: &tokio_postgres::Client) {
    c.batch_execute(&format!(
        "WITH a AS (
             INSERT INTO actions (uid, store, recipient, body)
             SELECT gen_random_uuid(), 's1', '+15551234567', 'burst'
             FROM generate_series(1, {BURST})
             RETURNING id)
         UPDATE actions SET state = 'claimed', owner = 'gone', epoch = 1,
                lease_until = now() - interval '1 minute', claimed_at = now()
         WHERE id IN (SELECT id FROM a);
         UPDATE outbox SET conflict = true, next_check_at = now()
         WHERE action_id IN (SELECT action_id FROM outbox ORDER BY action_id DESC LIMIT {BURST});"
    ))
    .await
    .expect("burst");
}

async fn explain(
    c: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> String {
    c.query(&format!("EXPLAIN {sql}"), params)
        .await
        .unwrap_or_else(|e| panic!("explain {sql}: {e}"))
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The plans of the statements that read the side tables, by name.
async fn plans(c: &tokio_postgres::Client) -> Vec<(&'static str, String)> {
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    vec![
        (
            "claim (its reclaim)",
            explain(
                c,
                claim_statement(ClaimMode::Fair),
                &[&"w", &64i64, &60_000f64, &4i32, &true, &now, &None::<&str>],
            )
            .await,
        ),
        (
            "due checks",
            explain(c, DUE_CHECKS, &[&64i64, &60_000f64, &now]).await,
        ),
        (
            "prune",
            explain(c, PRUNE, &[&now, &1_000i64, &60f64, &60f64]).await,
        ),
        (
            "open intents",
            explain(
                c,
                OPEN_INTENTS,
                &[&60f64, &INTENTS_PAST_ALERT_COUNTED_MAX, &now],
            )
            .await,
        ),
        ("owners", explain(c, OWNERS, &[&now]).await),
    ]
}

fn scans_history(plan: &str) -> bool {
    plan.contains("Seq Scan on actions ") || plan.contains("Seq Scan on outbox ")
}

fn assert_no_history_scan(state: &str, plans: &[(&str, String)]) {
    for (name, plan) in plans {
        assert!(
            !scans_history(plan),
            "{state}: {name} scans the history:\n{plan}"
        );
    }
}

#[tokio::test]
async fn side_table_readers_never_scan_the_history() {
    // Never analysed.
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    history(&c).await;
    burst(&c).await;
    assert_no_history_scan("never analysed", &plans(&c).await);

    // Analysed with nothing in flight, then the burst: stale.
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    history(&c).await;
    c.batch_execute("ANALYZE").await.unwrap();
    burst(&c).await;
    assert_no_history_scan("stale", &plans(&c).await);

    // Fresh.
    c.batch_execute("ANALYZE").await.unwrap();
    let fresh = plans(&c).await;
    assert_no_history_scan("fresh", &fresh);
    let reclaim = &fresh[0].1;
    assert!(reclaim.contains("actions_held"), "{reclaim}");

    // The control: the reclaim as it read before migration 13.
    let control = explain(&c, RECLAIM_BEFORE_13, &[&64i64]).await;
    assert!(
        scans_history(&control),
        "the control should scan actions:\n{control}"
    );
}
