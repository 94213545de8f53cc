//! A claim looks for expired leases only when asked (`ClaimReq::reclaim`):
//! asked, the expired lease comes first (at epoch + 1); not asked, it is
//! left alone and the claim takes a fresh action. How often to ask is the
//! worker's pacing (courier-dispatch, `worker/pacing.rs`, with its own
//! tests); the store keeps no state between claims. On a manual clock.

use courier_store::*;
use courier_testkit::fixtures;
use courier_testkit::fresh_db;
use std::time::Duration;

const SHORT_LEASE_MS: u64 = 100;

async fn claim(store: &PgStore, lease_ttl_ms: u64, reclaim: bool) -> Vec<Claimed> {
    let req = ClaimReq {
        provider: None,
        owner: "w".into(),
        n: 1,
        lease_ttl_ms,
        store_in_flight_max: 1_000,
        mode: ClaimMode::Fair,
        intents: false,
        reclaim,
    };
    store.action_claim(&req).await.unwrap().claimed
}

#[tokio::test]
async fn a_claim_looks_for_expired_leases_only_when_asked() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let ids = fixtures::enqueued(&store, "s1", 3).await;

    let first = claim(&store, SHORT_LEASE_MS, true).await;
    assert_eq!(first[0].lease.action_id, ids[0]);
    clock.advance(Duration::from_millis(SHORT_LEASE_MS + 50));

    // Not asked: the expired lease waits, and the claim takes a fresh action.
    let second = claim(&store, 60_000, false).await;
    assert_eq!(second.len(), 1);
    assert!(
        !second[0].reclaimed && second[0].lease.action_id == ids[1],
        "a claim not asked to look for expired leases took one: {second:?}"
    );

    // Asked: the expired lease comes first, at the next epoch.
    let third = claim(&store, 60_000, true).await;
    assert!(
        third[0].reclaimed && third[0].lease.action_id == ids[0],
        "{third:?}"
    );
    assert_eq!(third[0].lease.epoch, first[0].lease.epoch + 1);
}
