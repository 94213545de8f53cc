//! The claims' plans do not hang on fresh statistics.
//!
//! Autovacuum analyses a database at most once a minute, so after a burst
//! of one store's actions the planner can work from statistics that say
//! almost nothing is pending. The fair claim then walked a partial index of
//! every pending action (in id order) for each store it probed, past the
//! whole burst: in the fairness benchmark index scans then fetched 32-51
//! million rows per 5 s (10,000-20,000 otherwise) until the statistics caught
//! up, and the claims took both CPUs. Since migration 12 the pending actions
//! are found in `actions_ready` (its primary key for FIFO, its per-store
//! index `actions_ready_store` for the fair claim), and `actions` has no
//! partial index of pending actions left to mislead the planner. These tests
//! check the plans in the states a burst passes through, and that such a
//! partial index, put back, is walked in the stale state (so the check can
//! fail).

use courier_core::Status;
use courier_store::*;
use courier_testkit::{fixtures, fresh_db};

const QUIET_STORES: usize = 99;

/// A claim's plan, as text lines, for a batch of 7 with a cap of 1, on the
/// database's clock (the time parameter NULL, as in production).
async fn plan(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    let rows = c
        .query(
            &format!("EXPLAIN {sql}"),
            &[&"w", &7i64, &60_000f64, &1i32, &true, &now, &None::<&str>],
        )
        .await
        .expect("explain the claim");
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

/// A partial index of pending actions on `actions` (gone since migration
/// 12; the controls create one).
fn uses_pending_partial_index(plan: &[String]) -> bool {
    plan.iter().any(|l| l.contains("actions_pending"))
}

fn probes_ready_per_store(plan: &[String]) -> bool {
    plan.iter().any(|l| l.contains("actions_ready_store"))
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

    // The control: the partial index of pending actions as it was before
    // migration 12 (and the FIFO index before migration 3), put back.
    c.batch_execute("CREATE INDEX actions_pending_by_id ON actions (id) WHERE state = 'pending'")
        .await
        .unwrap();
    let old = plan(&c, claim_statement(ClaimMode::Fair)).await;
    assert!(
        old.iter().any(|l| l.contains("actions_pending_by_id")),
        "the state this test builds no longer misleads the planner into a partial \
         index of pending actions (the check below could not fail); plan:\n{}",
        old.join("\n")
    );
    c.batch_execute("DROP INDEX actions_pending_by_id")
        .await
        .unwrap();
    let now = plan(&c, claim_statement(ClaimMode::Fair)).await;
    assert!(
        !uses_pending_partial_index(&now),
        "the fair claim walks a partial index of pending actions:\n{}",
        now.join("\n")
    );
    assert!(
        probes_ready_per_store(&now),
        "the fair claim does not probe actions_ready per store:\n{}",
        now.join("\n")
    );
    assert_no_seq_scan_of_actions(&now, "stale, after a burst");

    // And it claims what it should: one action of the bulk store (cap 1)
    // and quiet stores' actions, oldest store turn first.
    let claimed = fixtures::claim(&db.store, &"w".into(), 7, 60_000, 1, ClaimMode::Fair)
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
async fn claims_keep_actions_ready_without_and_with_fresh_statistics() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    setup(&c).await;
    quiet_actions(&c, 2_000, "done").await;
    burst(&c, 1_000).await;
    quiet_actions(&c, 20, "pending").await;
    // Never analysed (a new database), then analysed with the burst pending.
    for state in ["never analysed", "fresh"] {
        if state == "fresh" {
            c.batch_execute("ANALYZE").await.unwrap();
        }
        let fair = plan(&c, claim_statement(ClaimMode::Fair)).await;
        assert!(
            probes_ready_per_store(&fair),
            "{state}:\n{}",
            fair.join("\n")
        );
        assert_no_seq_scan_of_actions(&fair, state);
        // The FIFO claim walks actions_ready in id order, and locks each
        // action through its key. (The update of the chosen rows, shared
        // with the fair claim, may scan a table this small.)
        let fifo = plan(&c, claim_statement(ClaimMode::Fifo)).await;
        let from = fifo.iter().position(|l| l.trim() == "CTE chosen");
        let to = fifo.iter().position(|l| l.trim() == "CTE fifo_stores");
        let chosen = match (from, to) {
            (Some(a), Some(b)) if a < b => &fifo[a..b],
            _ => panic!(
                "{state}: no CTE chosen before fifo_stores:\n{}",
                fifo.join("\n")
            ),
        };
        assert!(
            chosen.iter().any(|l| l.contains("actions_ready_pkey"))
                && chosen.iter().any(|l| l.contains("actions_pkey")),
            "{state}: the FIFO claim does not walk actions_ready's key:\n{}",
            fifo.join("\n")
        );
        assert_no_seq_scan_of_actions(chosen, state);
    }
}

// ---------------------------------------------------------------------------
// The walk over stores with work (migration 0005).
//
// The fair claim walked every store row in serving order and probed each for
// pending work: idle stores, served long ago, stood first in line, and a
// claim cost 300 ms with 100,000 stores registered. It now walks
// `store_work` through its index `store_work_order`. These tests check, with
// 100,000 stores registered, that the plan walks that index and probes
// `actions_ready_store` (never a sequential scan of `stores`,
// `store_work` or `actions` in the walk) with statistics taken before the stores with
// work grew a hundredfold, never taken, and fresh, as a custom and as a
// generic plan (what a prepared claim runs after five executions); and that
// the claim reads about 700 buffers where the old walk reads two per
// registered store (so the measure can fail).

const REGISTERED: i64 = 100_000;

/// `registered` stores served a day ago, none with work, and `active` stores
/// never served with `per_store` pending actions each (names active-NNNNN).
async fn idle_and_active(c: &tokio_postgres::Client, registered: i64, active: i64, per_store: i64) {
    c.batch_execute(
        "ALTER TABLE actions SET (autovacuum_enabled = off);
         ALTER TABLE stores SET (autovacuum_enabled = off);
         ALTER TABLE store_work SET (autovacuum_enabled = off);",
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO stores (store, last_served_at)
         SELECT format('idle-%s', lpad(i::text, 7, '0')), now() - interval '1 day'
         FROM generate_series(1, $1::bigint) i ON CONFLICT DO NOTHING",
        &[&registered],
    )
    .await
    .unwrap();
    more_active(c, 0, active, per_store).await;
}

/// Active stores `from..from + n`, each with `per_store` pending actions.
async fn more_active(c: &tokio_postgres::Client, from: i64, n: i64, per_store: i64) {
    c.execute(
        "INSERT INTO stores (store)
         SELECT format('active-%s', lpad(i::text, 5, '0')) FROM generate_series($1::bigint, $2::bigint) i",
        &[&from, &(from + n - 1)],
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO actions (uid, store, recipient, body)
         SELECT gen_random_uuid(), format('active-%s', lpad(i::text, 5, '0')), '+15551234567', 'x'
         FROM generate_series($1::bigint, $2::bigint) i, generate_series(1, $3::bigint) j",
        &[&from, &(from + n - 1), &per_store],
    )
    .await
    .unwrap();
}

/// The fair claim's plan (batch 16, cap 4), custom or generic.
async fn walk_plan(c: &tokio_postgres::Client, generic: bool) -> Vec<String> {
    let mode = if generic {
        "force_generic_plan"
    } else {
        "force_custom_plan"
    };
    c.batch_execute(&format!("SET plan_cache_mode = {mode}"))
        .await
        .unwrap();
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    let rows = c
        .query(
            &format!("EXPLAIN {}", claim_statement(ClaimMode::Fair)),
            &[&"w", &16i64, &60_000f64, &4i32, &true, &now, &None::<&str>],
        )
        .await
        .expect("explain the claim");
    c.batch_execute("RESET plan_cache_mode").await.unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

/// The lines of one CTE's subtree in a plan (`CTE name` to the next CTE).
fn cte<'a>(plan: &'a [String], name: &str) -> &'a [String] {
    let head = format!("CTE {name}");
    let Some(start) = plan.iter().position(|l| l.trim() == head) else {
        return &[];
    };
    let end = plan[start + 1..]
        .iter()
        .position(|l| {
            l.trim_start().starts_with("CTE ")
                || l.trim_start().starts_with("->  CTE Scan on reclaimed")
        })
        .map_or(plan.len(), |i| start + 1 + i);
    &plan[start..end]
}

fn assert_walks_store_work(plan: &[String], state: &str) {
    let text = plan.join("\n");
    let walk = cte(plan, "s");
    assert!(!walk.is_empty(), "{state}: no CTE s in the plan:\n{text}");
    // store_releases has a test of its own
    // (claims_fold_releases_per_store_with_missing_stale_and_fresh_statistics).
    for table in ["stores", "store_work", "actions", "actions_ready"] {
        assert!(
            !walk
                .iter()
                .any(|l| l.contains(&format!("Seq Scan on {table} "))),
            "{state}: the walk scans {table} sequentially:\n{text}"
        );
    }
    assert!(
        walk.iter().any(|l| l.contains("store_work_order")),
        "{state}: the walk does not use store_work_order:\n{text}"
    );
    assert!(
        probes_ready_per_store(walk),
        "{state}: no probe of actions_ready per store:\n{text}"
    );
    assert!(
        !uses_pending_partial_index(plan),
        "{state}: a partial index of pending actions:\n{text}"
    );
}

/// No part of the claim reads actions or actions_ready sequentially (the
/// sweep's probes and the update of the chosen rows included).
fn assert_no_seq_scan_of_actions(plan: &[String], state: &str) {
    assert!(
        !plan
            .iter()
            .any(|l| l.contains("Seq Scan on actions ") || l.contains("Seq Scan on actions_ready ")),
        "{state}: the claim scans actions sequentially:\n{}",
        plan.join("\n")
    );
}

#[tokio::test]
async fn fair_claim_walks_store_work_with_stale_missing_and_fresh_statistics() {
    // Never analysed.
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    idle_and_active(&c, REGISTERED, 100, 5).await;
    for generic in [false, true] {
        assert_walks_store_work(&walk_plan(&c, generic).await, "never analysed");
    }
    // Analysed with 100 stores with work, then 10,000 more arrive.
    c.batch_execute("ANALYZE").await.unwrap();
    more_active(&c, 100, 10_000, 1).await;
    for generic in [false, true] {
        let plan = walk_plan(&c, generic).await;
        assert_walks_store_work(&plan, "stale");
        assert_no_seq_scan_of_actions(&plan, "stale");
    }
    // Fresh.
    c.batch_execute("ANALYZE").await.unwrap();
    for generic in [false, true] {
        let plan = walk_plan(&c, generic).await;
        assert_walks_store_work(&plan, "fresh");
        assert_no_seq_scan_of_actions(&plan, "fresh");
    }
    // Statistics taken with 10,100 stores with work, then all but 16 of
    // them served (the claim empties and sweeps them).
    let mut left = 10_100;
    while left > 16 {
        let got = fixtures::claim(
            &db.store,
            &"w".into(),
            1_000,
            60_000,
            1_000,
            ClaimMode::Fair,
        )
        .await
        .unwrap();
        assert!(!got.is_empty());
        left = c
            .query_one("SELECT count(*) FROM store_work", &[])
            .await
            .unwrap()
            .get::<_, i64>(0);
    }
    for generic in [false, true] {
        let plan = walk_plan(&c, generic).await;
        assert_walks_store_work(&plan, "stale, shrunk");
        assert_no_seq_scan_of_actions(&plan, "stale, shrunk");
    }
}

/// Stores with deep backlogs: the sweep's check that a store has no other
/// pending action, written as NOT EXISTS, was planned as a hash anti join
/// over every pending action (a sequential scan of actions in every claim,
/// 250 ms with 2,000 pending in each of 100 stores). Each probe must stay a
/// per-store probe, whatever the statistics say.
#[tokio::test]
async fn fair_claim_probes_per_store_when_stores_hold_deep_backlogs() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    idle_and_active(&c, 1_000, 100, 2_000).await;
    for generic in [false, true] {
        assert_no_seq_scan_of_actions(&walk_plan(&c, generic).await, "deep, never analysed");
    }
    c.batch_execute("ANALYZE").await.unwrap();
    for generic in [false, true] {
        let plan = walk_plan(&c, generic).await;
        assert_no_seq_scan_of_actions(&plan, "deep, fresh");
        let text = plan.join("\n");
        // `sweep` is used once, so it is planned inline, at the end of the
        // statement, under the scan of its result (`w`).
        let tail_probes = plan
            .iter()
            .skip_while(|l| !l.contains("Subquery Scan on w "))
            .filter(|l| l.contains("actions_ready_store"))
            .count();
        assert!(
            tail_probes >= 2,
            "deep, fresh: the sweep does not probe actions_ready per store twice:\n{text}"
        );
    }
}

/// The shared buffers a statement touched (the top node of its plan).
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

/// A connection of the test's own (not the pool's), for transactions it
/// rolls back.
async fn own_client(url: &str) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c
}

/// The fair claim's walk before migration 0005: every store row, in serving
/// order, probed for pending work.
const WALK_OF_EVERY_STORE: &str = "
    SELECT st.store FROM stores st
    CROSS JOIN LATERAL (
        SELECT 1 FROM actions_ready p WHERE p.store = st.store
        ORDER BY p.id LIMIT 1) w
    LEFT JOIN (SELECT store, sum(n) AS n FROM store_releases GROUP BY store) r
        ON r.store = st.store
    WHERE st.in_flight - coalesce(r.n, 0) < 4
    ORDER BY st.last_served_at NULLS FIRST, st.store
    LIMIT 16
    FOR NO KEY UPDATE OF st SKIP LOCKED";

#[tokio::test]
async fn fair_claim_reads_in_proportion_to_stores_with_work_not_stores_registered() {
    let db = fresh_db().await;
    let mut c = own_client(&db.url).await;
    idle_and_active(&c, REGISTERED, 100, 5).await;
    c.batch_execute("ANALYZE").await.unwrap();
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    let claim = claim_statement(ClaimMode::Fair);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&"w", &16i64, &60_000f64, &4i32, &true, &now, &None::<&str>];
    let new = buffers(&mut c, claim, &params).await;
    let old = buffers(&mut c, WALK_OF_EVERY_STORE, &[]).await;
    eprintln!("{REGISTERED} stores registered, 100 with work: the fair claim read {new} buffers, the walk of every store {old}");
    assert!(
        old as i64 >= REGISTERED,
        "the old walk read only {old} buffers with {REGISTERED} stores: this measure cannot tell"
    );
    assert!(
        new < 2_000,
        "the fair claim read {new} buffers with {REGISTERED} stores registered and 100 with work \
         (the walk of every store: {old})"
    );
}

/// Scans of store_releases by this transaction so far: (sequential, index).
async fn release_scans(tx: &tokio_postgres::Transaction<'_>) -> (i64, i64) {
    let row = tx
        .query_one(
            "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables
             WHERE relname = 'store_releases'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Runs `sql` in a transaction that is rolled back, and returns how it
/// scanned store_releases.
async fn scans_of_releases(
    c: &mut tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> (i64, i64) {
    let tx = c.transaction().await.unwrap();
    let before = release_scans(&tx).await;
    tx.query(sql, params).await.unwrap();
    let after = release_scans(&tx).await;
    tx.rollback().await.unwrap();
    (after.0 - before.0, after.1 - before.1)
}

/// Claims fold the releases of the stores they lock, and the fair claim
/// probes the releases of a store whose counter is at the cap. Written as a
/// join of the locked stores with all of `store_releases` and a sum over
/// it, they were planned as sequential scans of the table whenever its
/// statistics were wrong: missing (1.8 ms of a 3.4 ms claim, with 10,000
/// stores with work in `courier bench scale`), or taken when the table was a
/// page (a scan per store: 2 ms of a 4.6 ms claim, with 100). Each claim is
/// run for real, and the transaction's own counters must show index scans of
/// the table and no sequential one. The control: the old fold, in the state
/// where it scanned, is seen scanning.
#[tokio::test]
async fn claims_read_releases_through_the_index_with_missing_stale_and_fresh_statistics() {
    let db = fresh_db().await;
    let mut c = own_client(&db.url).await;
    c.batch_execute("ALTER TABLE store_releases SET (autovacuum_enabled = off)")
        .await
        .unwrap();
    idle_and_active(&c, 0, 10_000, 2).await;
    // Every store at the cap by its counter, with a release not yet folded:
    // the fair claim probes each store it walks, and folds each it locks.
    let at_cap_with_releases = "UPDATE stores SET in_flight = 4;
         DELETE FROM store_releases;
         INSERT INTO store_releases (store, n) SELECT store, 1 FROM stores";
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    let claim = |mode| claim_statement(mode);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&"w", &16i64, &60_000f64, &4i32, &true, &now, &None::<&str>];
    let states: [(&str, String); 4] = [
        ("never analysed", at_cap_with_releases.to_string()),
        (
            "analysed when one store held every release",
            format!(
                "DELETE FROM store_releases;
                 INSERT INTO store_releases (store, n)
                 SELECT 'active-00000', 1 FROM generate_series(1, 5000);
                 ANALYZE store_releases; {at_cap_with_releases}"
            ),
        ),
        (
            "analysed when the table held one row",
            format!(
                "DELETE FROM store_releases;
                 INSERT INTO store_releases (store, n) VALUES ('active-00000', 1);
                 ANALYZE store_releases; {at_cap_with_releases}"
            ),
        ),
        ("fresh", format!("{at_cap_with_releases}; ANALYZE")),
    ];
    for (i, (state, prepare)) in states.iter().enumerate() {
        c.batch_execute(prepare).await.unwrap();
        if i == 0 {
            // The control: the fold as it was, in the state where the
            // benchmark caught it scanning.
            let old_fold = "WITH s AS (SELECT store FROM stores ORDER BY store LIMIT 16)
                DELETE FROM store_releases r USING s WHERE r.store = s.store";
            let (seq, _) = scans_of_releases(&mut c, old_fold, &[]).await;
            assert!(
                seq > 0,
                "the control: the old fold did not scan, so this measure cannot tell"
            );
        }
        for mode in [ClaimMode::Fair, ClaimMode::Fifo] {
            let (seq, idx) = scans_of_releases(&mut c, claim(mode), &params).await;
            assert_eq!(
                seq, 0,
                "{mode:?}, {state}: the claim read store_releases sequentially"
            );
            assert!(
                idx > 0,
                "{mode:?}, {state}: the claim did not read store_releases at all"
            );
        }
    }
}

/// Deep backlogs behind statistics that saw none: `actions` analysed when
/// every action was finished (as in a database holding history), then 100
/// stores with 2,000 pending actions each. A claim of 64 must read about
/// what it takes, not every pending action of the stores it serves: joined
/// plainly to `actions`, the walk of a store's pending actions was planned
/// as all of them joined and sorted before the lock, and a claim read
/// 437,000 buffers in `courier bench history` (0.4-1.7 s a claim).
#[tokio::test]
async fn fair_claim_reads_what_it_takes_from_deep_backlogs_behind_stale_statistics() {
    let db = fresh_db().await;
    let mut c = own_client(&db.url).await;
    c.batch_execute(
        "ALTER TABLE actions SET (autovacuum_enabled = off);
         ALTER TABLE actions_ready SET (autovacuum_enabled = off);",
    )
    .await
    .unwrap();
    idle_and_active(&c, 0, 100, 1).await;
    c.batch_execute(
        "UPDATE actions SET state = 'done', done_at = now();
         INSERT INTO actions (uid, store, recipient, body, state, done_at)
         SELECT gen_random_uuid(), 'active-00000', '+15551234567', 'old', 'done', now()
         FROM generate_series(1, 50000);
         ANALYZE actions;
         ANALYZE actions_ready;",
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO actions (uid, store, recipient, body)
         SELECT gen_random_uuid(), format('active-%s', lpad(i::text, 5, '0')), '+15551234567', 'x'
         FROM generate_series(0, 99) i, generate_series(1, 2000) j",
        &[],
    )
    .await
    .unwrap();
    c.batch_execute("ANALYZE actions_ready").await.unwrap();
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    for mode in [ClaimMode::Fair, ClaimMode::Fifo] {
        for generic in ["force_custom_plan", "force_generic_plan"] {
            c.batch_execute(&format!("SET plan_cache_mode = {generic}"))
                .await
                .unwrap();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
                [&"w", &64i64, &60_000f64, &4i32, &true, &now, &None::<&str>];
            let read = buffers(&mut c, claim_statement(mode), &params).await;
            eprintln!("{mode:?}, {generic}: a claim of 64 read {read} buffers");
            assert!(
                read < 20_000,
                "{mode:?}, {generic}: a claim of 64 read {read} buffers with 2,000 pending in \
                 each of 100 stores"
            );
        }
    }
}

/// A store of one connection (so its prepared statements' plan counts are
/// the test's) over 100 stores, 40 of them with 10 pending actions each.
async fn one_connection_with_work(url: &str) -> PgStore {
    let mut sc = StoreConfig::new(url);
    sc.migrate = false;
    sc.pool_size_max = 1;
    let store = PgStore::connect(&sc).await.unwrap();
    idle_and_active(&store.client().await.unwrap(), 100, 40, 10).await;
    store
}

/// Claims run with their generic plan, planned once per connection: the
/// server judged the fair claim's generic plan costlier than its custom
/// ones and planned it on every call, as long as running it. The control
/// leaves the choice to the server: the fair claim is planned afresh on
/// (nearly) every call, beyond the five custom plans the server always
/// makes first.
#[tokio::test]
async fn claims_run_their_generic_plan_not_one_planned_per_call() {
    let db = fresh_db().await;
    let store = one_connection_with_work(&db.url).await;
    const CLAIMS: i64 = 12;
    let owner: std::sync::Arc<str> = "w".into();
    for (label, s, modes) in [
        (
            "forced",
            store.clone(),
            &[ClaimMode::Fair, ClaimMode::Fifo][..],
        ),
        (
            "control",
            store.with_claim_custom_plans(),
            &[ClaimMode::Fair][..],
        ),
    ] {
        let before = plans_made(&s.client().await.unwrap(), "WITH gate AS").await;
        for mode in modes {
            for _ in 0..CLAIMS / modes.len() as i64 {
                let got = fixtures::claim(&s, &owner, 2, 60_000, 4, *mode)
                    .await
                    .unwrap();
                assert!(!got.is_empty(), "{label}: the claim found nothing");
            }
        }
        let after = plans_made(&s.client().await.unwrap(), "WITH gate AS").await;
        let (generic, custom) = (after.0 - before.0, after.1 - before.1);
        eprintln!("{label}: {generic} generic and {custom} custom plans for {CLAIMS} claims");
        if label == "forced" {
            assert_eq!(custom, 0, "{label}: the claims were planned per call");
            assert_eq!(
                generic, CLAIMS,
                "{label}: every claim runs the generic plan"
            );
        } else {
            assert!(
                custom >= CLAIMS - 2,
                "{label}: the control made {custom} custom plans for {CLAIMS} fair claims"
            );
        }
    }
}

/// Generic and custom plans made so far for the prepared statements on
/// this connection whose text contains `marker`.
async fn plans_made(c: &tokio_postgres::Client, marker: &str) -> (i64, i64) {
    let row = c
        .query_one(
            "SELECT coalesce(sum(generic_plans), 0)::bigint, coalesce(sum(custom_plans), 0)::bigint
             FROM pg_prepared_statements WHERE strpos(statement, $1) > 0",
            &[&marker],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Settles run their two statements' generic plans, planned once per
/// connection (planned per call, they spent 0.4 ms planning a batch of
/// one). The control runs the settle's fence prepared on its own, the
/// choice left to the server: the count sees a custom plan per call.
#[tokio::test]
async fn settles_run_their_generic_plans_not_one_planned_per_call() {
    let db = fresh_db().await;
    let store = one_connection_with_work(&db.url).await;
    const SETTLES: i64 = 8;
    let owner: std::sync::Arc<str> = "w".into();
    let [(lock_types, lock), (_, write)] = settle_statements();
    let (lock_marker, write_marker) = (&lock[lock.len() - 60..], &write[write.len() - 60..]);
    let c = store.client().await.unwrap();
    let before = (
        plans_made(&c, lock_marker).await,
        plans_made(&c, write_marker).await,
    );
    drop(c);
    for _ in 0..SETTLES {
        let got = fixtures::claim_to_send(&store, &owner, 2, 60_000, 4, ClaimMode::Fair)
            .await
            .unwrap();
        assert_eq!(got.len(), 2, "the claim found too little");
        let reqs: Vec<SettleReq> = got
            .iter()
            .map(|a| SettleReq {
                lease: a.lease.clone(),
                report: Status::Accepted,
                message_id: Some(format!("m-{}", a.lease.action_id)),
                from_lookup: false,
            })
            .collect();
        for answer in store.actions_settle(&reqs, 60_000).await.unwrap() {
            assert!(
                matches!(answer, Ok(SettleOutcome::Settled(_))),
                "{answer:?}"
            );
        }
    }
    let c = store.client().await.unwrap();
    for (name, marker, before) in [
        ("fence", lock_marker, before.0),
        ("write", write_marker, before.1),
    ] {
        let after = plans_made(&c, marker).await;
        let (generic, custom) = (after.0 - before.0, after.1 - before.1);
        eprintln!(
            "settle {name}: {generic} generic and {custom} custom plans for {SETTLES} settles"
        );
        assert_eq!(custom, 0, "settle {name}: planned per call");
        assert_eq!(
            generic, SETTLES,
            "settle {name}: every settle runs the generic plan"
        );
    }
    // The control: the fence prepared on its own, run without the settings.
    c.batch_execute(&format!("PREPARE settle_control ({lock_types}) AS {lock}"))
        .await
        .unwrap();
    for _ in 0..SETTLES {
        c.batch_execute("EXECUTE settle_control('{1,2}', '{1,1}', '{w,w}')")
            .await
            .unwrap();
    }
    let (_, custom): (i64, i64) = {
        let row = c
            .query_one(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'settle_control'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert!(
        custom >= 5,
        "the control (the server's choice) made {custom} custom plans for {SETTLES} runs"
    );
}

/// Every claim statement (fair and FIFO, with and without the look for
/// expired leases) and both settle statements, prepared on a connection as
/// a worker's pool prepares them, twice: named `{name}_claims` (a claim's
/// or a settle's settings) and `{name}_control`. Each with the arguments an
/// EXPLAIN EXECUTE gives it (a generic plan ignores their values).
async fn prepare_claims_and_settles(c: &tokio_postgres::Client) -> Vec<(String, &'static str)> {
    let mut names = Vec::new();
    let mut prepare = async |name: String, types: &str, sql: &str, args: &'static str| {
        for kind in ["claims", "control"] {
            c.batch_execute(&format!("PREPARE {name}_{kind} ({types}) AS {sql}"))
                .await
                .unwrap();
        }
        names.push((name, args));
    };
    for (name, mode) in [("fair", ClaimMode::Fair), ("fifo", ClaimMode::Fifo)] {
        for (i, sql) in claim_statements(mode).iter().enumerate() {
            prepare(
                format!("{name}{i}"),
                "text, bigint, double precision, integer, boolean, timestamptz, text",
                sql,
                "'w', 16, 60000, 4, true, NULL, NULL",
            )
            .await;
        }
    }
    let [(lock_types, lock), (write_types, write)] = settle_statements();
    prepare(
        "settle_lock".into(),
        lock_types,
        lock,
        "'{1,2}', '{1,1}', '{w,w}'",
    )
    .await;
    prepare(
        "settle_write".into(),
        write_types,
        write,
        "'{1,2}', '{accepted,accepted}', '{m1,m2}', '{f,f}', '{f,f}', '{s,s}', 60000, '{}', '{}', '{}', NULL",
    )
    .await;
    names
}

/// The plan a prepared statement runs under `settings` (SET LOCAL
/// statements, in a transaction of its own, rolled back): its cached
/// generic plan, made at its first execution and kept until an ANALYZE of a
/// table it reads.
async fn cached_plan(
    c: &mut tokio_postgres::Client,
    name: &str,
    args: &str,
    settings: &str,
) -> Vec<String> {
    let tx = c.transaction().await.unwrap();
    tx.batch_execute(settings).await.unwrap();
    let rows = tx
        .query(&format!("EXPLAIN EXECUTE {name}({args})"), &[])
        .await
        .expect("explain the statement");
    tx.rollback().await.unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

/// What in a plan reads more than the rows it is after: a sequential scan,
/// a hash or merge join (each reads one side whole), or an index scan of
/// `actions`, `stores` or `outbox` without an index condition (a walk of
/// the whole index). The walks in order with a LIMIT (`store_work_order`,
/// `actions_ready`'s keys, `actions_held_lease`) read what the LIMIT lets
/// them, and are not listed.
fn reads_beyond_keys(plan: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, line) in plan.iter().enumerate() {
        let l = line.trim_start().trim_start_matches("->  ");
        if l.starts_with("Seq Scan")
            || l.starts_with("Hash Join")
            || l.starts_with("Hash Semi Join")
            || l.starts_with("Hash Anti Join")
            || l.starts_with("Hash Left Join")
            || l.starts_with("Hash Right Join")
            || l.starts_with("Merge ")
        {
            found.push(l.to_string());
        }
        let whole_index = ["actions ", "stores ", "outbox "].iter().any(|t| {
            (l.starts_with("Index Scan") || l.starts_with("Index Only Scan"))
                && l.contains(&format!(" on {t}"))
        }) && !plan.get(i + 1).is_some_and(|n| n.contains("Index Cond"));
        if whole_index {
            found.push(l.to_string());
        }
    }
    found
}

/// The plans claims and settles run (their generic plan, PLAN_BY_KEY)
/// read by key in every state statistics pass through: never analysed;
/// analysed while `actions` held a few dozen rows; the plan made then, kept
/// while the table grew a hundredfold (a young database between two
/// autovacuum passes: such a plan scanned `actions` in every claim of a
/// fairness run); and fresh, with 10,000 more idle stores. The control, the
/// same generic plans with the planner's other settings at their defaults,
/// scans `actions` in the grown state, a claim's and a settle's.
#[tokio::test]
async fn claims_and_settles_plans_read_by_key_with_missing_tiny_grown_and_fresh_statistics() {
    let db = fresh_db().await;
    let mut c = own_client(&db.url).await;
    idle_and_active(&c, 1_000, 5, 1).await;
    // No table the claims read is analysed behind the test's back (that
    // would make their plans again, from the grown tables).
    for table in [
        "outbox",
        "actions_ready",
        "actions_held",
        "actions_done",
        "intents_watched",
        "store_releases",
        "count_deltas",
    ] {
        c.batch_execute(&format!(
            "ALTER TABLE {table} SET (autovacuum_enabled = off)"
        ))
        .await
        .unwrap();
    }
    c.batch_execute(
        "INSERT INTO actions (uid, store, recipient, body, state, done_at)
         SELECT gen_random_uuid(), 'active-00000', '+15551234567', 'old', 'done', now()
         FROM generate_series(1, 60);",
    )
    .await
    .unwrap();
    let names = prepare_claims_and_settles(&c).await;
    const CONTROL: &str = "SET LOCAL plan_cache_mode = force_generic_plan";
    let mut control_caught = Vec::new();
    let mut check = async |c: &mut tokio_postgres::Client, state: &str| {
        for (name, args) in &names {
            let plan = cached_plan(c, &format!("{name}_claims"), args, PLAN_BY_KEY).await;
            let found = reads_beyond_keys(&plan);
            assert!(
                found.is_empty(),
                "{state}, {name}: the statement reads beyond keys: {found:?}\n{}",
                plan.join("\n")
            );
            let control =
                reads_beyond_keys(&cached_plan(c, &format!("{name}_control"), args, CONTROL).await);
            eprintln!("{state}, {name}, control: {control:?}");
            if control
                .iter()
                .any(|l| l.starts_with("Seq Scan on actions "))
            {
                control_caught.push(format!("{state}, {name}"));
            }
        }
    };
    check(&mut c, "never analysed").await;
    c.batch_execute("ANALYZE").await.unwrap();
    check(&mut c, "analysed tiny").await;
    // 6,000 finished actions and 300 stores with one pending each, the
    // statistics and the cached plans untouched.
    c.batch_execute(
        "INSERT INTO actions (uid, store, recipient, body, state, done_at)
         SELECT gen_random_uuid(), format('idle-%s', lpad((1 + i % 1000)::text, 7, '0')),
                '+15551234567', 'old', 'done', now()
         FROM generate_series(1, 6000) i;",
    )
    .await
    .unwrap();
    more_active(&c, 5, 300, 1).await;
    check(&mut c, "analysed tiny, grown").await;
    c.execute(
        "INSERT INTO stores (store, last_served_at)
         SELECT format('more-idle-%s', i), now() - interval '1 day'
         FROM generate_series(1, 10000) i",
        &[],
    )
    .await
    .unwrap();
    c.batch_execute("ANALYZE").await.unwrap();
    check(&mut c, "fresh").await;
    for family in ["fair", "settle"] {
        assert!(
            control_caught
                .iter()
                .any(|s| s.starts_with(&format!("analysed tiny, grown, {family}"))),
            "the control (generic plans, other settings default) of a {family} statement \
             should scan actions once grown; it did in: {control_caught:?}"
        );
    }
}

/// The planner settings the claims change in their transaction
/// (`PLAN_BY_KEY`: `SET LOCAL name = value` statements).
fn claim_settings() -> Vec<String> {
    PLAN_BY_KEY
        .lines()
        .filter_map(|l| l.trim().strip_prefix("SET LOCAL "))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_string()))
        .collect()
}

/// The trigger functions on courier's tables that do not set, for
/// themselves, each of `settings`: those whose plans a claim that fires them
/// first on a connection would make with its own settings.
async fn triggers_unpinned(c: &tokio_postgres::Client, settings: &[String]) -> Vec<String> {
    let rows = c
        .query(
            "SELECT DISTINCT p.proname, coalesce(p.proconfig, ARRAY[]::text[])
             FROM pg_trigger t
             JOIN pg_proc p ON p.oid = t.tgfoid
             JOIN pg_class r ON r.oid = t.tgrelid
             JOIN pg_namespace n ON n.oid = r.relnamespace
             WHERE NOT t.tgisinternal AND n.nspname = current_schema()
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let mut unpinned = Vec::new();
    for r in &rows {
        let name: String = r.get(0);
        let config: Vec<String> = r.get(1);
        let missing: Vec<&String> = settings
            .iter()
            .filter(|s| !config.iter().any(|c| c.starts_with(&format!("{s}="))))
            .collect();
        if !missing.is_empty() {
            unpinned.push(format!("{name} lacks {missing:?}"));
        }
    }
    unpinned
}

/// Every trigger function on courier's tables plans with settings of its
/// own (migration 18): PL/pgSQL keeps a function's plans for the session,
/// made with the settings of the statement that first fired it, and a claim
/// turns hash and merge joins off. The control: a trigger function added
/// without them is caught.
#[tokio::test]
async fn trigger_functions_pin_every_planner_setting_the_claims_change() {
    let db = fresh_db().await;
    let c = own_client(&db.url).await;
    let settings = claim_settings();
    assert_eq!(
        settings,
        [
            "plan_cache_mode",
            "enable_seqscan",
            "enable_hashjoin",
            "enable_mergejoin"
        ],
        "the settings read from PLAN_BY_KEY"
    );
    let triggers: i64 = c
        .query_one(
            "SELECT count(DISTINCT t.tgfoid) FROM pg_trigger t WHERE NOT t.tgisinternal",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(triggers >= 14, "{triggers} trigger functions found");
    let unpinned = triggers_unpinned(&c, &settings).await;
    assert!(
        unpinned.is_empty(),
        "trigger functions without their own settings: {unpinned:?}"
    );
    // The control.
    c.batch_execute(
        "CREATE FUNCTION courier_unpinned() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RETURN NULL; END $$;
         CREATE TRIGGER actions_unpinned AFTER UPDATE ON actions
             FOR EACH STATEMENT EXECUTE FUNCTION courier_unpinned();",
    )
    .await
    .unwrap();
    let unpinned = triggers_unpinned(&c, &settings).await;
    assert!(
        unpinned.iter().any(|u| u.starts_with("courier_unpinned ")),
        "the control was not caught: {unpinned:?}"
    );
}
