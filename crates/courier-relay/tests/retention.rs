//! The retention of dedup records against a real etcd: a redelivery inside
//! the window is suppressed; once the record's lease has expired, the same
//! event is applied again. The window is sized so that no copy of an event
//! can still arrive by then (see `RelayLimits::dedup_window_min_ms`).

use courier_relay::model::{CreateRequest, Event, Keys};
use courier_relay::protocol::Applied;
use courier_relay::servers::{Binaries, Servers};
use courier_relay::store::Store;
use courier_relay::{reference, RelayLimits};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_inside_the_window_is_suppressed_and_one_outside_it_applies_again() {
    let s = Servers::start(&Binaries::default(), Duration::from_secs(15))
        .await
        .expect("etcd and nats-server start");
    let limits = RelayLimits {
        stream_max_age_ms: 1_000,
        outbox_age_max_ms: 500,
        ack_wait_ms: 500,
        dedup_retention_ms: 3_000,
        ..RelayLimits::default()
    };
    limits
        .validate()
        .expect("the window covers max age, outbox age and AckWait");
    assert_eq!(limits.dedup_window_min_ms(), 2_000);
    let store = Store::connect(
        std::slice::from_ref(&s.etcd.endpoint),
        Keys::new("retention").unwrap(),
        &limits,
    )
    .await
    .unwrap();
    let req = CreateRequest {
        idempotency_key: "req-1".into(),
        amount: 7,
    };
    let created = reference::create(&store, &req, "t1", &limits)
        .await
        .unwrap();
    let event = Event {
        event_id: created.event_id.clone(),
        task_id: "t1".into(),
        amount: 7,
    };
    let mut rng = StdRng::seed_from_u64(1);
    let first = reference::complete(&store, &event, "w1", &limits, &mut rng)
        .await
        .unwrap();
    assert!(
        matches!(
            first,
            Applied::Committed {
                counter_after: 7,
                ..
            }
        ),
        "{first:?}"
    );
    let committed = Instant::now();

    // Inside the window: the record is there and the redelivery is suppressed.
    let again = reference::complete(&store, &event, "w2", &limits, &mut rng)
        .await
        .unwrap();
    assert!(matches!(again, Applied::Suppressed { .. }), "{again:?}");

    // The record lives at least the retention, and then goes with its lease.
    let dedup_key = store.keys().dedup(&event.event_id);
    while store.get(&dedup_key).await.unwrap().is_some() {
        assert!(
            committed.elapsed() < Duration::from_secs(15),
            "the record never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        committed.elapsed() >= Duration::from_millis(limits.dedup_retention_ms),
        "expired after {:?}, before the retention",
        committed.elapsed()
    );

    // Outside the window the same event is applied again: this is why the
    // window must outlast every copy that can still be delivered.
    let late = reference::complete(&store, &event, "w3", &limits, &mut rng)
        .await
        .unwrap();
    assert!(
        matches!(
            late,
            Applied::Committed {
                counter_after: 14,
                ..
            }
        ),
        "{late:?}"
    );
}
