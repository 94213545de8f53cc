//! No store with work ever goes missing from `store_work` (migration 0005).
//!
//! The fair claim walks `store_work`, so a store with a pending action and
//! no row there would never be served. Rows are added by a trigger on every
//! insert of actions and removed only by the sweep, which first takes the
//! store's exclusive advisory lock or skips the store (an enqueue still open
//! holds the shared one; migration 11) and checks for pending work with a
//! snapshot taken after that lock. The race it answers: a claim takes the last pending action of a
//! store while an enqueue of that store commits. These tests run that race,
//! once step by step and once with many enqueues and claims at once, and
//! run both again with the sweep broken on purpose (one statement, no lock:
//! `PgStore::with_store_work_sweep_unlocked`), which the checker
//! (`PgStore::store_work_missing`) catches.

use courier_store::*;
use courier_testkit::fixtures::{self, new_action, LONG_LEASE_MS};
use courier_testkit::fresh_db;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Per-store cap high enough that it never stops a claim here.
const CAP: u32 = 1_000;
/// How long the correct store is raced, and the broken one at most.
const RACE_FOR: Duration = Duration::from_secs(4);
const BROKEN_RACE_FOR_MAX: Duration = Duration::from_secs(30);
/// How long an enqueue's transaction stays open after its insert.
const ENQUEUE_OPEN_MS: f64 = 3.0;

fn owner() -> Arc<str> {
    Arc::from("race-worker")
}

async fn claim(store: &PgStore, n: u32) -> Vec<Claimed> {
    fixtures::claim(store, &owner(), n, LONG_LEASE_MS, CAP, ClaimMode::Fair)
        .await
        .expect("claim")
}

/// The stores in `store_work`, by name.
async fn listed(c: &tokio_postgres::Client) -> Vec<String> {
    let rows = c
        .query("SELECT store FROM store_work ORDER BY store", &[])
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// What the step-by-step race left: the stores with work missing from
/// `store_work` once the enqueue committed, and how many actions the next
/// claim found.
async fn enqueue_open_while_a_claim_empties_its_store(store: &PgStore) -> (Vec<String>, usize) {
    fixtures::enqueued(store, "s1", 1).await;
    // The enqueue of a second action, left open after its insert.
    let mut c = store.client().await.unwrap();
    let tx = c.transaction().await.unwrap();
    action_enqueue(&*tx, &new_action("s1", 2)).await.unwrap();
    // The claim takes the only action it can see and sweeps s1: the store
    // is empty as far as its snapshot goes.
    let first = claim(store, 16).await;
    assert_eq!(first.len(), 1, "{first:?}");
    tx.commit().await.unwrap();
    let missing = store.store_work_missing().await.unwrap();
    let next = claim(store, 16).await;
    (missing, next.len())
}

#[tokio::test]
async fn an_enqueue_open_while_a_claim_empties_its_store_keeps_the_store_listed() {
    let db = fresh_db().await;
    let (missing, next) = enqueue_open_while_a_claim_empties_its_store(&db.store).await;
    assert!(missing.is_empty(), "stores with work missing: {missing:?}");
    assert_eq!(next, 1, "the second action was not claimed");

    // The negative control: the sweep that checks without the lock removes
    // s1 while its enqueue is open; the checker sees it and the claim starves.
    let db = fresh_db().await;
    let broken = db.store.with_store_work_sweep_unlocked();
    let (missing, next) = enqueue_open_while_a_claim_empties_its_store(&broken).await;
    assert_eq!(
        missing,
        vec!["s1".to_string()],
        "the broken sweep was not caught"
    );
    assert_eq!(next, 0, "the claim found work the structure had lost");
}

#[tokio::test]
async fn a_store_whose_work_is_claimed_leaves_store_work_and_comes_back_with_new_work() {
    let db = fresh_db().await;
    let s = &db.store;
    let c = s.client().await.unwrap();
    let listed = || listed(&c);
    fixtures::enqueued(s, "s1", 2).await;
    fixtures::enqueued(s, "s2", 1).await;
    assert_eq!(listed().await, vec!["s1", "s2"]);
    // Claims of one action: s1 first (never served, first by name), then s2
    // (s1 was just served), which empties s2; then s1's last.
    assert_eq!(claim(s, 1).await[0].store, "s1");
    assert_eq!(claim(s, 1).await[0].store, "s2");
    assert_eq!(
        listed().await,
        vec!["s1"],
        "the emptied store was not swept"
    );
    assert_eq!(claim(s, 1).await[0].store, "s1");
    assert!(listed().await.is_empty());
    assert!(claim(s, 16).await.is_empty());
    // New work puts the store back in line.
    fixtures::enqueued(s, "s2", 1).await;
    assert_eq!(listed().await, vec!["s2"]);
    assert_eq!(claim(s, 16).await.len(), 1);
    // A row left without work (as FIFO claims leave them) is swept by the
    // next fair claim that finds it at the front of the line.
    fixtures::enqueued(s, "s3", 1).await;
    let fifo = fixtures::claim(s, &owner(), 1, LONG_LEASE_MS, CAP, ClaimMode::Fifo)
        .await
        .unwrap();
    assert_eq!(fifo.len(), 1);
    assert_eq!(listed().await, vec!["s3"], "FIFO claims sweep nothing");
    assert!(claim(s, 16).await.is_empty());
    assert!(
        listed().await.is_empty(),
        "the idle row at the front was kept"
    );
}

/// The worker's claim: intents written, expired leases looked for.
fn to_send(n: u32) -> ClaimReq {
    ClaimReq {
        provider: None,
        owner: owner(),
        n,
        lease_ttl_ms: LONG_LEASE_MS,
        store_in_flight_max: CAP,
        mode: ClaimMode::Fair,
        intents: true,
        reclaim: true,
    }
}

#[tokio::test]
async fn a_claim_names_its_sweep_and_the_row_stays_until_the_sweep_runs() {
    let db = fresh_db().await;
    let s = &db.store;
    let c = s.client().await.unwrap();
    let listed = || listed(&c);
    fixtures::enqueued(s, "s1", 1).await;
    fixtures::enqueued(s, "s2", 1).await;
    let taken = s.action_claim(&to_send(1)).await.unwrap();
    assert_eq!(taken.claimed.len(), 1, "{taken:?}");
    assert_eq!(taken.claimed[0].store, "s1");
    assert!(
        taken.claimed[0].attempt_counted,
        "the intent is written in the claim"
    );
    assert_eq!(taken.sweep, ["s1"]);
    assert_eq!(
        listed().await,
        vec!["s1", "s2"],
        "swept before it was asked"
    );
    assert_eq!(s.store_work_sweep(&taken.sweep).await.unwrap(), ["s1"]);
    assert_eq!(listed().await, vec!["s2"]);
    // A sweep never run costs nothing but the row, which a later claim
    // names again once it stands at the front of the line.
    let taken = s.action_claim(&to_send(16)).await.unwrap();
    assert_eq!(taken.claimed.len(), 1);
    assert_eq!(taken.sweep, ["s2"]);
    drop(taken);
    assert_eq!(listed().await, vec!["s2"]);
    assert!(claim(s, 16).await.is_empty());
    assert!(
        listed().await.is_empty(),
        "the idle row at the front was kept"
    );
}

#[tokio::test]
async fn the_sweeps_of_several_claims_run_as_one() {
    let db = fresh_db().await;
    let s = &db.store;
    let c = s.client().await.unwrap();
    let listed = || listed(&c);
    for store in ["s1", "s2", "s3"] {
        fixtures::enqueued(s, store, 1).await;
    }
    // Each claim names the store it emptied and the rows without work it
    // walked past (still listed: nothing swept yet).
    let first = s.action_claim(&to_send(1)).await.unwrap().sweep;
    let second = s.action_claim(&to_send(1)).await.unwrap().sweep;
    let third = s.action_claim(&to_send(1)).await.unwrap().sweep;
    assert_eq!(first, ["s1"]);
    assert_eq!(second, ["s1", "s2"]);
    assert_eq!(third, ["s1", "s2", "s3"]);
    assert_eq!(listed().await, vec!["s1", "s2", "s3"], "nothing swept yet");
    // s1 has work again before the joint sweep runs: it stays listed.
    fixtures::enqueued(s, "s1", 1).await;
    let mut removed = s.store_work_sweep(&third).await.unwrap();
    removed.sort();
    assert_eq!(removed, ["s2", "s3"]);
    assert_eq!(listed().await, vec!["s1"]);
}

#[tokio::test]
async fn a_failed_sweep_does_not_cost_the_claim_its_actions() {
    let db = fresh_db().await;
    let s = &db.store;
    let c = s.client().await.unwrap();
    fixtures::enqueued(s, "s1", 1).await;
    // The sweep's function gone: every sweep fails.
    c.batch_execute(
        "ALTER FUNCTION courier_store_work_sweep(text[]) RENAME TO courier_store_work_sweep_gone",
    )
    .await
    .unwrap();
    let taken = s
        .action_claim(&to_send(16))
        .await
        .expect("the claim committed: its actions come back");
    assert_eq!(taken.claimed.len(), 1, "{taken:?}");
    assert!(s.store_work_sweep(&taken.sweep).await.is_err());
    let rows = c.query("SELECT store FROM store_work", &[]).await.unwrap();
    assert_eq!(rows.len(), 1, "the row the failed sweep left");
    // With the sweep back, a later claim sweeps the idle row at the front.
    c.batch_execute(
        "ALTER FUNCTION courier_store_work_sweep_gone(text[]) RENAME TO courier_store_work_sweep",
    )
    .await
    .unwrap();
    assert!(claim(s, 16).await.is_empty());
    let rows = c.query("SELECT store FROM store_work", &[]).await.unwrap();
    assert!(rows.is_empty(), "the row was not swept later");
}

/// What a race of concurrent enqueues and claims saw.
#[derive(Debug, Default)]
struct RaceSeen {
    enqueued: u64,
    claimed: u64,
    /// Checks that found a store with work missing from `store_work`.
    checks_missing: u64,
    checks: u64,
}

/// Four enqueuers (each enqueue's transaction held open a few ms after its
/// insert) and two fair claimers over three stores, with a checker polling
/// the invariant, until `until` says stop; then the queue is drained.
async fn race(store: &PgStore, until: impl Fn(&RaceSeen, Instant) -> bool) -> RaceSeen {
    let stop = Arc::new(AtomicBool::new(false));
    let (enqueued, claimed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = tokio::task::JoinSet::new();
    for e in 0..4u64 {
        let (store, stop, enqueued) = (store.clone(), stop.clone(), enqueued.clone());
        tasks.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut c = store.client().await.unwrap();
                let tx = c.transaction().await.unwrap();
                let name = format!("s{}", (e + n) % 3);
                action_enqueue(&*tx, &new_action(&name, n as usize))
                    .await
                    .unwrap();
                tx.execute("SELECT pg_sleep($1::float8 / 1000)", &[&ENQUEUE_OPEN_MS])
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                enqueued.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        });
    }
    for _ in 0..2 {
        let (store, stop, claimed) = (store.clone(), stop.clone(), claimed.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let got = claim(&store, 2).await.len() as u64;
                claimed.fetch_add(got, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
    }
    let started = Instant::now();
    let mut seen = RaceSeen::default();
    while !until(&seen, started) {
        seen.checks += 1;
        if !store.store_work_missing().await.unwrap().is_empty() {
            seen.checks_missing += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    // Drain: every action enqueued must be claimable by fair claims.
    loop {
        let got = claim(store, 64).await.len() as u64;
        if got == 0 {
            break;
        }
        claimed.fetch_add(got, Ordering::Relaxed);
    }
    seen.enqueued = enqueued.load(Ordering::Relaxed);
    seen.claimed = claimed.load(Ordering::Relaxed);
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_and_claims_never_lose_a_store_with_work() {
    let db = fresh_db().await;
    let seen = race(&db.store, |_, t| t.elapsed() >= RACE_FOR).await;
    assert!(
        seen.enqueued > 100,
        "too little traffic to mean anything: {seen:?}"
    );
    assert_eq!(seen.checks_missing, 0, "{seen:?}");
    assert_eq!(
        seen.claimed, seen.enqueued,
        "actions left unclaimed: {seen:?}"
    );
    assert!(db.store.store_work_missing().await.unwrap().is_empty());

    // The negative control: with the broken sweep the same race loses a
    // store with work, and the checker or the drain catches it.
    let db = fresh_db().await;
    let broken = db.store.with_store_work_sweep_unlocked();
    let seen = race(&broken, |s, t| {
        s.checks_missing > 0 || t.elapsed() >= BROKEN_RACE_FOR_MAX
    })
    .await;
    assert!(
        seen.checks_missing > 0 || seen.claimed < seen.enqueued,
        "the broken sweep lost nothing in {BROKEN_RACE_FOR_MAX:?}: {seen:?}"
    );
}
