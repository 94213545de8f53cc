//! Flow control in the claim (migration 27): a store's rate and in-flight
//! cap, a provider's ceiling and pause, on a manual clock; the settings'
//! validation and their `events` rows. The exactness of a store's bucket
//! under concurrent worker processes, counted from the provider's log, is
//! courier-rig's (tests/flow_control.rs there).

use courier_core::rate::{ProviderSettings, StoreSettings};
use courier_store::*;
use courier_testkit::{fixtures, fresh_db};
use std::sync::Arc;
use std::time::Duration;

fn req(n: u32, provider: Option<&str>) -> ClaimReq {
    ClaimReq {
        provider: provider.map(Arc::from),
        owner: "w".into(),
        n,
        lease_ttl_ms: 600_000,
        store_in_flight_max: 1_000,
        mode: ClaimMode::Fair,
        intents: true,
        reclaim: false,
    }
}

async fn taken_by_store(store: &PgStore, r: &ClaimReq) -> (Vec<String>, Option<u64>) {
    let t = store.action_claim(r).await.unwrap();
    (
        t.claimed.into_iter().map(|c| c.store).collect(),
        t.provider_paused_ms,
    )
}

fn rate(per_s: f64, burst: u32) -> StoreSettings {
    StoreSettings {
        rate_per_s: Some(per_s),
        burst: Some(burst),
        in_flight_max: None,
    }
}

#[tokio::test]
async fn a_store_over_its_rate_is_passed_over_until_its_bucket_refills() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    fixtures::enqueued(&store, "slow", 50).await;
    fixtures::enqueued(&store, "free", 50).await;
    store
        .store_configure("slow", &rate(2.0, 3), "test")
        .await
        .unwrap();

    // The burst first: 3 of `slow`; `free` takes its share of the batch
    // (half of 20), as it would beside any other store.
    let (got, _) = taken_by_store(&store, &req(20, None)).await;
    let slow = got.iter().filter(|s| *s == "slow").count();
    assert_eq!(slow, 3, "{got:?}");
    assert_eq!(got.len(), 13, "the other store is not held back: {got:?}");

    // Empty bucket: nothing of `slow`, however often it is asked.
    for _ in 0..3 {
        let (got, _) = taken_by_store(&store, &req(20, None)).await;
        assert!(!got.iter().any(|s| s == "slow"), "{got:?}");
    }
    // 2/s: one token after 500 ms, two after a second, never past the burst.
    clock.advance(Duration::from_millis(500));
    let (got, _) = taken_by_store(&store, &req(20, None)).await;
    assert_eq!(got.iter().filter(|s| *s == "slow").count(), 1, "{got:?}");
    clock.advance(Duration::from_millis(60_000));
    let (got, _) = taken_by_store(&store, &req(20, None)).await;
    assert_eq!(got.iter().filter(|s| *s == "slow").count(), 3, "{got:?}");
}

#[tokio::test]
async fn a_bucket_is_exact_under_concurrent_claimers() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    fixtures::enqueued(&store, "s", 400).await;
    store
        .store_configure("s", &rate(10.0, 5), "test")
        .await
        .unwrap();
    // Four rounds 400 ms apart (4 tokens each, under the burst); in each, waves of eight claimers at once until
    // a wave takes nothing (claimers that find the store row locked pass
    // it over). Exactly 5 (the burst) + 3 x 4 in all: none granted twice,
    // none lost.
    let mut total = 0;
    for round in 0..4 {
        if round > 0 {
            clock.advance(Duration::from_millis(400));
        }
        loop {
            let claims = (0..8).map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.action_claim(&req(4, None)).await.unwrap() })
            });
            let wave: usize = futures::future::join_all(claims)
                .await
                .into_iter()
                .map(|c| c.unwrap().claimed.len())
                .sum();
            if wave == 0 {
                break;
            }
            total += wave;
        }
    }
    assert_eq!(total, 5 + 3 * 4);
}

#[tokio::test]
async fn a_stores_own_cap_replaces_the_workers() {
    let db = fresh_db().await;
    let store = db.store.clone();
    fixtures::enqueued(&store, "one", 10).await;
    fixtures::enqueued(&store, "many", 10).await;
    let cap = StoreSettings {
        in_flight_max: Some(1),
        ..Default::default()
    };
    store.store_configure("one", &cap, "test").await.unwrap();
    let (got, _) = taken_by_store(&store, &req(20, None)).await;
    assert_eq!(got.iter().filter(|s| *s == "one").count(), 1, "{got:?}");
    assert_eq!(got.iter().filter(|s| *s == "many").count(), 10, "{got:?}");
    let flow = store.store_flow("one").await.unwrap().unwrap();
    assert_eq!((flow.in_flight, flow.settings.in_flight_max), (1, Some(1)));
}

#[tokio::test]
async fn a_paused_provider_gets_no_fresh_claims_and_every_claimer_learns_it() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    fixtures::enqueued(&store, "s", 10).await;
    let lasts = store.provider_pause("fake", 2_000).await.unwrap();
    assert_eq!(lasts, 2_000);
    // A shorter pause does not cut the longer one.
    assert_eq!(store.provider_pause("fake", 500).await.unwrap(), 2_000);

    let (got, paused) = taken_by_store(&store, &req(5, Some("fake"))).await;
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(paused, Some(2_000));
    // Another provider's claims are not held.
    let (got, paused) = taken_by_store(&store, &req(5, Some("other"))).await;
    assert_eq!((got.len(), paused), (5, None));

    clock.advance(Duration::from_millis(2_001));
    let (got, paused) = taken_by_store(&store, &req(5, Some("fake"))).await;
    assert_eq!((got.len(), paused), (5, None));
    let flow = store.provider_flow("fake").await.unwrap().unwrap();
    assert_eq!(flow.pauses, 2);
}

#[tokio::test]
async fn a_providers_ceiling_meters_every_claim_for_it() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    fixtures::enqueued(&store, "a", 30).await;
    fixtures::enqueued(&store, "b", 30).await;
    let ceiling = ProviderSettings {
        rate_per_s: Some(4.0),
        burst: Some(6),
    };
    store
        .provider_configure("fake", &ceiling, "test")
        .await
        .unwrap();
    for mode in [ClaimMode::Fair, ClaimMode::Fifo] {
        let mut r = req(20, Some("fake"));
        r.mode = mode;
        clock.advance(Duration::from_secs(60));
        let (got, _) = taken_by_store(&store, &r).await;
        assert_eq!(got.len(), 6, "{mode:?}: the burst");
        let (got, _) = taken_by_store(&store, &r).await;
        assert!(got.is_empty(), "{mode:?}: {got:?}");
        clock.advance(Duration::from_millis(500));
        let (got, _) = taken_by_store(&store, &r).await;
        assert_eq!(got.len(), 2, "{mode:?}: 4/s for 500 ms");
    }
    // Without the provider named, no ceiling.
    let (got, _) = taken_by_store(&store, &req(20, None)).await;
    assert_eq!(got.len(), 20);
}

#[tokio::test]
async fn settings_are_validated_and_every_change_is_an_event() {
    let db = fresh_db().await;
    let store = db.store.clone();
    for bad in [
        StoreSettings {
            rate_per_s: Some(-1.0),
            ..Default::default()
        },
        rate(5.0, 0),
        StoreSettings {
            burst: Some(3),
            ..Default::default()
        },
        StoreSettings {
            in_flight_max: Some(0),
            ..Default::default()
        },
    ] {
        let e = store.store_configure("s", &bad, "test").await.unwrap_err();
        assert!(matches!(e, FlowError::Invalid(_)), "{bad:?}: {e}");
    }
    assert!(matches!(
        store
            .store_configure("no/slash", &StoreSettings::default(), "t")
            .await,
        Err(FlowError::Invalid(_))
    ));
    assert_eq!(store.store_flow("s").await.unwrap(), None, "nothing made");

    // A store never seen is made by its settings; a rate alone gets one
    // second's worth of burst.
    let set = StoreSettings {
        rate_per_s: Some(2.5),
        burst: None,
        in_flight_max: Some(2),
    };
    let flow = store.store_configure("s", &set, "ops").await.unwrap();
    assert_eq!(flow.settings.burst, Some(3));
    assert_eq!(flow.tokens, Some(3.0));
    let back = store
        .store_configure("s", &StoreSettings::default(), "ops")
        .await
        .unwrap();
    assert_eq!(back.settings, StoreSettings::default());
    assert_eq!(back.tokens, None);

    let c = db.store.client().await.unwrap();
    let details: Vec<String> = c
        .query(
            "SELECT detail FROM events WHERE kind = 'store_settings' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(details.len(), 2, "{details:?}");
    assert!(
        details[0].contains("by=ops") && details[0].contains("rate_per_s=none->2.5"),
        "{details:?}"
    );
    assert!(
        details[1].contains("in_flight_max=2->default"),
        "{details:?}"
    );
}
