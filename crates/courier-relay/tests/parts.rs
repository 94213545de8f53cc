//! The parts under the lab, against real servers: idempotent create,
//! concurrent applies on one counter, a broker restart with the store kept,
//! and the error for a missing server binary.

use courier_relay::broker::{Broker, Names, PublishOutcome};
use courier_relay::model::{event_id_for, CreateRequest, Event, Keys};
use courier_relay::protocol::{Applied, CreateError};
use courier_relay::servers::{Binaries, ServerError, Servers};
use courier_relay::store::Store;
use courier_relay::{reference, RelayLimits};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

async fn servers() -> Servers {
    Servers::start(&Binaries::default(), Duration::from_secs(15))
        .await
        .expect("etcd and nats-server start")
}

async fn store(s: &Servers, ns: &str) -> Store {
    Store::connect(
        std::slice::from_ref(&s.etcd.endpoint),
        Keys::new(ns).unwrap(),
        &RelayLimits::default(),
    )
    .await
    .expect("etcd answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_is_idempotent_and_refuses_a_changed_request() {
    let s = servers().await;
    let store = store(&s, "create").await;
    let limits = RelayLimits::default();
    let req = CreateRequest {
        idempotency_key: "req-1".into(),
        amount: 7,
    };

    let first = reference::create(&store, &req, "t1", &limits)
        .await
        .unwrap();
    assert!(first.created);
    assert_eq!(first.event_id, event_id_for("t1"));
    let pending = store.outbox_pending(10).await.unwrap();
    assert_eq!(
        pending,
        vec![Event {
            event_id: "evt-t1".into(),
            task_id: "t1".into(),
            amount: 7
        }]
    );

    let before = store.revision().await.unwrap();
    let again = reference::create(&store, &req, "t2", &limits)
        .await
        .unwrap();
    assert_eq!((again.task_id.as_str(), again.created), ("t1", false));
    assert_eq!(
        store.revision().await.unwrap(),
        before,
        "a repeat writes nothing"
    );
    assert_eq!(store.outbox_pending(10).await.unwrap().len(), 1);

    let changed = CreateRequest {
        amount: 8,
        ..req.clone()
    };
    match reference::create(&store, &changed, "t3", &limits).await {
        Err(CreateError::KeyReused {
            first_task_id,
            first_amount: 7,
            amount: 8,
            ..
        }) => {
            assert_eq!(first_task_id, "t1")
        }
        other => panic!("expected KeyReused, got {other:?}"),
    }
    let other_key = CreateRequest {
        idempotency_key: "req-2".into(),
        amount: 1,
    };
    assert!(matches!(
        reference::create(&store, &other_key, "t1", &limits).await,
        Err(CreateError::TaskIdTaken(id)) if id == "t1"
    ));
    let bad = CreateRequest {
        idempotency_key: String::new(),
        amount: 1,
    };
    assert!(matches!(
        reference::create(&store, &bad, "t4", &limits).await,
        Err(CreateError::BadRequest(_))
    ));
    assert_eq!(
        store.revision().await.unwrap(),
        before,
        "refused requests write nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_applies_lose_no_update_and_apply_each_event_once() {
    let s = servers().await;
    let store = store(&s, "apply").await;
    let limits = RelayLimits::default();
    // Eight events, each delivered twice, all applied at once on one counter.
    let mut handles = Vec::new();
    for copy in 0..2u64 {
        for amount in 1..=8u64 {
            let store = store.clone();
            let limits = limits.clone();
            handles.push(tokio::spawn(async move {
                let task_id = format!("t{amount}");
                let event = Event {
                    event_id: event_id_for(&task_id),
                    task_id,
                    amount,
                };
                let mut rng = StdRng::seed_from_u64(copy * 100 + amount);
                reference::complete(&store, &event, &format!("w{copy}"), &limits, &mut rng).await
            }));
        }
    }
    let (mut committed, mut suppressed, mut conflicts) = (0, 0, 0);
    for h in handles {
        match h.await.unwrap().expect("apply succeeds") {
            Applied::Committed { conflicts: c, .. } => {
                committed += 1;
                conflicts += c;
            }
            Applied::Suppressed { conflicts: c } => {
                suppressed += 1;
                conflicts += c;
            }
        }
    }
    assert_eq!((committed, suppressed), (8, 8));
    let obs = store.observe().await.unwrap();
    assert_eq!(
        obs.counter, 36,
        "1 + 2 + ... + 8, each once ({conflicts} lost compares on the way)"
    );
    assert_eq!(obs.dedup.len(), 8);
    assert_eq!(obs.results.len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_store_stream_survives_a_broker_kill() {
    let mut s = servers().await;
    let limits = RelayLimits::default();
    let names = Names::new(&Keys::new("restart").unwrap());
    let broker = Broker::connect(&s.nats.url, names.clone(), &limits)
        .await
        .unwrap();
    broker.ensure(&limits).await.unwrap();
    for i in 1..=3 {
        let task_id = format!("t{i}");
        let e = Event {
            event_id: event_id_for(&task_id),
            task_id,
            amount: i,
        };
        assert!(
            matches!(broker.publish(&e).await, PublishOutcome::Acked { stream_sequence } if stream_sequence == i)
        );
    }
    drop(broker);

    let status = s.nats.kill().await.unwrap();
    assert_eq!(status.signal(), Some(9), "the broker died by SIGKILL");
    s.nats.restart(Duration::from_secs(15)).await.unwrap();

    let broker = Broker::connect(&s.nats.url, names, &limits).await.unwrap();
    assert_eq!(broker.stream_messages().await.unwrap(), 3);
    let census = broker.census(Duration::from_secs(10)).await.unwrap();
    assert_eq!(census.copies.get("evt-t2"), Some(&1));
    let consumer = broker.consumer_state().await.unwrap();
    assert_eq!(consumer.undelivered, 3, "the durable consumer survived too");
}

#[tokio::test]
async fn a_missing_server_binary_is_named_with_its_package() {
    let binaries = Binaries {
        nats_server: "nats-server-not-installed".into(),
        ..Binaries::default()
    };
    match Servers::start(&binaries, Duration::from_secs(1)).await {
        Err(e @ ServerError::MissingBinary { .. }) => {
            let text = e.to_string();
            assert!(text.contains("nats-server-not-installed"), "{text}");
            assert!(text.contains("apt-get install -y nats-server"), "{text}");
        }
        Err(e) => panic!("expected MissingBinary, got {e}"),
        Ok(_) => panic!("a missing binary cannot start"),
    }
}
