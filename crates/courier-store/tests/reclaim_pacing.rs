//! An owner's claims look for expired leases at most every
//! `RECLAIM_EVERY_MS` while they come back full, and at once after a claim
//! that came back short (`PgStore::action_claim`). On a manual clock: an expired
//! lease is left alone by a full claim inside the interval (the check that
//! the pacing is there), taken by the first claim after it, and taken at
//! once after a short claim.

use courier_store::*;
use courier_testkit::fixtures;
use courier_testkit::fresh_db;
use std::time::Duration;

const SHORT_LEASE_MS: u64 = 100;

async fn claim(store: &PgStore, n: u32, ttl: u64) -> Vec<Claimed> {
    store
        .action_claim(&"w".into(), n, ttl, 1_000, ClaimMode::Fair)
        .await
        .unwrap()
}

#[tokio::test]
async fn expired_leases_are_looked_for_once_a_second_while_claims_come_back_full() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let ids = fixtures::enqueued(&store, "s1", 3).await;

    let first = claim(&store, 1, SHORT_LEASE_MS).await;
    assert_eq!(first[0].lease.action_id, ids[0]);
    clock.advance(Duration::from_millis(SHORT_LEASE_MS + 50));

    // Inside the interval, and the last claim came back full: the expired
    // lease waits, and the claim takes a fresh action.
    let second = claim(&store, 1, 60_000).await;
    assert_eq!(second.len(), 1);
    assert!(
        !second[0].reclaimed && second[0].lease.action_id == ids[1],
        "a full claim inside the interval looked for expired leases: {second:?}"
    );

    // Past the interval: the expired lease comes first.
    clock.advance(Duration::from_millis(RECLAIM_EVERY_MS as u64));
    let third = claim(&store, 1, 60_000).await;
    assert!(
        third[0].reclaimed && third[0].lease.action_id == ids[0],
        "{third:?}"
    );

    // A claim that comes back short (one of five) makes the next one look
    // at once.
    let fourth = claim(&store, 5, SHORT_LEASE_MS).await;
    assert_eq!(fourth.len(), 1);
    assert_eq!(fourth[0].lease.action_id, ids[2]);
    clock.advance(Duration::from_millis(SHORT_LEASE_MS + 50));
    let fifth = claim(&store, 5, 60_000).await;
    assert_eq!(fifth.len(), 1);
    assert!(
        fifth[0].reclaimed && fifth[0].lease.action_id == ids[2],
        "{fifth:?}"
    );
}
