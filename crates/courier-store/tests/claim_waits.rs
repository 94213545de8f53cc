//! A claim never waits behind an open enqueue (migration 11).
//!
//! Through migration 10 an enqueue held FOR KEY SHARE on its store's row
//! (the foreign key, and the `store_work` trigger) while claims lock and
//! update that row. A claim committing under the enqueue's lock leaves a
//! multixact on the old version, and a claim with an older snapshot that
//! reaches it follows the update chain and waits for the newest version's
//! holder, SKIP LOCKED notwithstanding: two such claims deadlock. The steps
//! below are that interleaving, with a cursor to hold the older snapshot.
//! Now the enqueue holds no lock on the row and the late claim skips the
//! store at once; the negative control takes the old key-share lock in the
//! enqueue and the same steps wait (caught by `lock_timeout`).

use courier_store::*;
use courier_testkit::fixtures::{self, new_action, LONG_LEASE_MS};
use courier_testkit::fresh_db;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the late claim may wait before the test calls it a wait.
const LOCK_TIMEOUT_MS: u64 = 2_000;
const CAP: u32 = 1_000;

/// The late claim's answer: the store rows it locked, or its error.
async fn late_claim_after_a_claim_under_an_open_enqueue(
    store: &PgStore,
    enqueue_takes_key_share: bool,
) -> (Result<usize, tokio_postgres::Error>, Duration) {
    // Committed work for the first claim.
    fixtures::enqueued(store, "x", 2).await;
    // E: an enqueue of x, left open after its insert.
    let mut e = store.client().await.unwrap();
    let etx = e.transaction().await.unwrap();
    action_enqueue(&*etx, &new_action("x", 100)).await.unwrap();
    if enqueue_takes_key_share {
        etx.execute("SELECT 1 FROM stores WHERE store = 'x' FOR KEY SHARE", &[])
            .await
            .unwrap();
    }
    // C: a claim's lock of x, its snapshot taken now, the lock not yet.
    let mut c = store.client().await.unwrap();
    let ctx = c.transaction().await.unwrap();
    ctx.batch_execute(&format!(
        "SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS};
         DECLARE late CURSOR FOR
             SELECT store FROM stores WHERE store = 'x' FOR NO KEY UPDATE SKIP LOCKED"
    ))
    .await
    .unwrap();
    // C0: a whole claim of x, committed: it updates x's row.
    let owner: Arc<str> = Arc::from("first");
    let got = fixtures::claim(store, &owner, 1, LONG_LEASE_MS, CAP, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    // C3: another claim holding x's newest version.
    let mut c3 = store.client().await.unwrap();
    let c3tx = c3.transaction().await.unwrap();
    let held = c3tx
        .query(
            "SELECT store FROM stores WHERE store = 'x' FOR NO KEY UPDATE SKIP LOCKED",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(held.len(), 1, "the third claim holds x");
    // C goes on.
    let t0 = Instant::now();
    let answer = ctx.query("FETCH late", &[]).await.map(|r| r.len());
    let waited = t0.elapsed();
    drop(c3tx);
    drop(etx);
    (answer, waited)
}

#[tokio::test]
async fn a_claim_with_an_older_snapshot_skips_a_store_whose_enqueue_is_open() {
    let db = fresh_db().await;
    let (answer, waited) = late_claim_after_a_claim_under_an_open_enqueue(&db.store, false).await;
    assert_eq!(
        answer.expect("the late claim did not wait"),
        0,
        "x is held by the third claim: skipped"
    );
    assert!(
        waited < Duration::from_millis(LOCK_TIMEOUT_MS),
        "waited {waited:?}"
    );

    // The negative control: the enqueue's key-share lock of migrations 1-10
    // makes the same late claim wait for the third one.
    let db = fresh_db().await;
    let (answer, _) = late_claim_after_a_claim_under_an_open_enqueue(&db.store, true).await;
    let err = answer.expect_err("with the key-share lock the late claim must wait");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "{err}"
    );
}

#[tokio::test]
async fn an_open_enqueue_holds_no_lock_on_its_store_row() {
    let db = fresh_db().await;
    fixtures::enqueued(&db.store, "x", 1).await;
    let mut e = db.store.client().await.unwrap();
    let etx = e.transaction().await.unwrap();
    action_enqueue(&*etx, &new_action("x", 100)).await.unwrap();
    let c = db.store.client().await.unwrap();
    let strongest = "SELECT store FROM stores WHERE store = 'x' FOR UPDATE NOWAIT";
    let rows = c.query(strongest, &[]).await.expect("the row is free");
    assert_eq!(rows.len(), 1);
    // The control: a key-share lock, as the foreign key took, is seen.
    etx.execute("SELECT 1 FROM stores WHERE store = 'x' FOR KEY SHARE", &[])
        .await
        .unwrap();
    let err = c.query(strongest, &[]).await.expect_err("now it is held");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "{err}"
    );
}

#[tokio::test]
async fn an_action_of_an_unregistered_store_is_refused_without_the_foreign_key() {
    let db = fresh_db().await;
    let c = db.store.client().await.unwrap();
    let insert = "INSERT INTO actions (uid, store, recipient, body)
                  VALUES (gen_random_uuid(), $1, '+15551234567', 'hi')";
    let err = c
        .execute(insert, &[&"nobody"])
        .await
        .expect_err("no such store");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION),
        "{err}"
    );
    let message = err.as_db_error().map(|d| d.message().to_string());
    assert_eq!(message.as_deref(), Some("store nobody is not registered"));
    c.execute("INSERT INTO stores (store) VALUES ('somebody')", &[])
        .await
        .unwrap();
    assert_eq!(c.execute(insert, &[&"somebody"]).await.unwrap(), 1);
    assert!(db.store.store_work_missing().await.unwrap().is_empty());
}
