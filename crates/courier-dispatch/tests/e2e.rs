//! The worker end to end: a real PostgreSQL, the real fake provider over
//! HTTP (faults on), the real API for webhooks; judged by the provider's log.

mod common;

use common::{
    client, client_with_callback, limits, start_api, verify, wait_all_final, worker, KEY, SECRET,
};
use courier_core::{ActionState, Limits, Status};
use courier_fake::{self as fake, FakeConfig, Latency};
use courier_provider::SendOutcome;
use courier_store::PgStore;
use courier_testkit::fixtures::{self, Held};
use courier_testkit::fresh_db;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_action_has_exactly_one_effect_through_a_flaky_provider() {
    let db = fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("provider.jsonl");
    let mut cfg = FakeConfig::new(&log, KEY, SECRET);
    cfg.seed = 11;
    cfg.timeout_hold_ms = 600;
    cfg.lookup_lag_ms = 50;
    let provider = fake::start(cfg).await.unwrap();
    let api = start_api(db.store.clone()).await;
    for store in 0..10 {
        fixtures::enqueued(&db.store, &format!("s{store}"), 30).await;
    }
    let stop = CancellationToken::new();
    let mut runs = Vec::new();
    for w in 0..2 {
        let wk = worker(
            &db.store,
            client(&provider.url(), &api, &limits()),
            limits(),
            &format!("w{w}"),
        );
        let stop = stop.clone();
        runs.push(tokio::spawn(async move { wk.run(stop).await }));
    }
    wait_all_final(&db.store, 300, Duration::from_secs(90)).await;
    stop.cancel();
    for r in runs {
        r.await.unwrap();
    }
    provider.shutdown().await.unwrap();
    let report = verify(&db.store, &log).await;
    assert!(report.passed(), "{}", report.table());
    // The faults really happened: some sends were unknown, some webhooks
    // duplicated or out of order, and all were absorbed.
    let s = db.store.summary(1800).await.unwrap();
    assert!(s.event("send_unknown") > 0, "{:?}", s.events);
    assert!(report.stats.lookup_lines > 0);
    assert_eq!(s.state("done"), 300, "{:?}", s.by_state);
}

/// A first owner claims, writes the intent, counts an attempt and sends,
/// then dies before it records the answer (the testkit's `sent` fixture and
/// one request). Its message carries no status callback, so the status can
/// only be learned by looking the key up.
async fn send_and_die(store: &PgStore, provider: &str, l: &Limits) -> Held {
    let held = fixtures::sent(store).await;
    let silent = client_with_callback(provider, None, l);
    let first = silent.send(&held.key, &held.to, &held.body).await;
    assert!(matches!(first, SendOutcome::Accepted(_)), "{first:?}");
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reclaimed_action_is_looked_up_and_sent_once() {
    let db = fresh_db().await;
    // The lease statements read a clock this test moves.
    let (store, clock) = db.manual_clock().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("provider.jsonl");
    let mut cfg = FakeConfig::new(&log, KEY, SECRET);
    cfg.faults = courier_fake::FaultRates::NONE;
    let provider = fake::start(cfg).await.unwrap();
    let api = start_api(store.clone()).await;
    fixtures::enqueued(&store, "s0", 1).await;
    let l = limits();
    let c = send_and_die(&store, &provider.url(), &l).await;
    // The dead owner's lease runs out at once: the clock moves past it, and
    // a live worker takes over at epoch + 1 with its first claim.
    fixtures::expire_lease(&clock, fixtures::LONG_LEASE_MS);
    let stop = CancellationToken::new();
    let wk = worker(&store, client(&provider.url(), &api, &l), l, "live");
    let s2 = stop.clone();
    let run = tokio::spawn(async move { wk.run(s2).await });
    // The lookup finds the message and the new owner settles it; no
    // callback tells its final status, so the reconciler looks it up each
    // time its check is due, on the same clock: moved past the check while
    // the action waits for its final status.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let view = store.action_get(c.lease.action_id).await.unwrap().unwrap();
        if matches!(view.state, ActionState::Done | ActionState::Failed) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not final in time: {view:?}"
        );
        if view.state == ActionState::Dispatched {
            clock.advance(Duration::from_millis(limits().final_overdue_ms + 1));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    run.await.unwrap();
    provider.shutdown().await.unwrap();
    let report = verify(&db.store, &log).await;
    assert!(report.passed(), "{}", report.table());
    let text = std::fs::read_to_string(&log).unwrap();
    let sends = text
        .lines()
        .filter(|l| l.contains("\"op\":\"send\""))
        .count();
    let lookups = text
        .lines()
        .filter(|l| l.contains("\"op\":\"lookup\""))
        .count();
    assert_eq!(
        sends, 1,
        "the new owner found the message and did not send again:\n{text}"
    );
    assert!(lookups >= 1);
    let view = db
        .store
        .action_get(c.lease.action_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.epoch, c.lease.epoch + 1);
    assert!(view.status.is_some_and(Status::is_final), "{view:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_provider_does_not_cost_a_healthy_worker_its_lease() {
    let db = fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("provider.jsonl");
    let mut cfg = FakeConfig::new(&log, KEY, SECRET);
    cfg.faults = courier_fake::FaultRates::NONE;
    // Every request takes longer than a lease: only heartbeats keep it.
    cfg.latency = "uniform:900..1000".parse::<Latency>().unwrap();
    let provider = fake::start(cfg).await.unwrap();
    let api = start_api(db.store.clone()).await;
    for store in 0..5 {
        fixtures::enqueued(&db.store, &format!("s{store}"), 1).await;
    }
    let l = Limits {
        lease_ttl_ms: 800,
        heartbeat_interval_ms: 200,
        send_margin_ms: 100,
        request_timeout_ms: 600,
        ..limits()
    };
    // Client time-out above the latency, so sends succeed slowly.
    let slow = Limits {
        request_timeout_ms: 3_000,
        ..l.clone()
    };
    let slow_client = client(&provider.url(), &api, &slow);
    let stop = CancellationToken::new();
    let a = worker(&db.store, slow_client.clone(), l.clone(), "a");
    let b = worker(&db.store, slow_client, l, "b");
    let (sa, sb) = (stop.clone(), stop.clone());
    let ra = tokio::spawn(async move { a.run(sa).await });
    let rb = tokio::spawn(async move { b.run(sb).await });
    wait_all_final(&db.store, 5, Duration::from_secs(60)).await;
    stop.cancel();
    ra.await.unwrap();
    rb.await.unwrap();
    provider.shutdown().await.unwrap();
    let s = db.store.summary(1800).await.unwrap();
    assert_eq!(
        s.event("reclaimed"),
        0,
        "a healthy worker lost a lease: {:?}",
        s.events
    );
    assert_eq!(s.event("fenced"), 0, "{:?}", s.events);
    let report = verify(&db.store, &log).await;
    assert!(report.passed(), "{}", report.table());
}
