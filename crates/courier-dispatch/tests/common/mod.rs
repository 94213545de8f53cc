//! What the worker's end-to-end tests share: the limits, the API for the
//! provider's webhooks, clients, workers, waiting for final states, and the
//! verifier run on the fake provider's log.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use courier_core::Limits;
use courier_dispatch::server::{router, ServerConfig};
use courier_dispatch::worker::{Provider, Worker, WorkerConfig};
use courier_provider::{ClientConfig, ProviderClient};
use courier_store::{ClaimMode, PgStore};
use courier_verify::Report;
use std::path::Path;
use std::time::{Duration, Instant};

pub const KEY: &str = "e2e-key";
pub const SECRET: &str = "e2e-secret";

pub fn limits() -> Limits {
    Limits {
        lease_ttl_ms: 1_500,
        heartbeat_interval_ms: 300,
        send_margin_ms: 300,
        request_timeout_ms: 400,
        final_overdue_ms: 3_000,
        backoff_base_ms: 20,
        backoff_cap_ms: 300,
        ..Limits::default()
    }
}

/// The enqueue and webhook API on a free port; returns its base URL.
pub async fn start_api(store: PgStore) -> String {
    let app = router(
        store,
        ServerConfig {
            limits: limits(),
            webhook_secret: SECRET.as_bytes().to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: None,
            request_timeout: Duration::from_secs(10),
            provider_webhooks: Default::default(),
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A client whose messages call the API back with their statuses.
pub fn client(provider: &str, api: &str, l: &Limits) -> ProviderClient {
    client_with_callback(provider, Some(format!("{api}/v1/webhooks/provider")), l)
}

/// A client whose messages call `callback` back with their statuses, or
/// nobody (`None`): then only lookups tell courier how a message ended.
pub fn client_with_callback(
    provider: &str,
    callback: Option<String>,
    l: &Limits,
) -> ProviderClient {
    ProviderClient::new(ClientConfig {
        base_url: provider.to_string(),
        api_key: KEY.to_string(),
        status_callback: callback,
        timeout: Duration::from_millis(l.request_timeout_ms),
    })
    .unwrap()
}

pub fn worker<P: Provider>(store: &PgStore, c: P, l: Limits, name: &str) -> Worker<P> {
    Worker::new(
        store.clone(),
        c,
        WorkerConfig {
            limits: l,
            claim_mode: ClaimMode::Fair,
            owner: name.to_string(),
            idle_poll_ms: 10,
            reconcile: true,
            pruner: None,
            seed: 7,
            tier: courier_core::Tier::A,
            provider_gate: None,
        },
    )
}

/// Waits until `n` actions are done or failed (polling the store).
pub async fn wait_all_final(store: &PgStore, n: i64, within: Duration) {
    let deadline = Instant::now() + within;
    let mut last_print = Instant::now();
    loop {
        let s = store.summary(1800).await.unwrap();
        if last_print.elapsed() > Duration::from_secs(2) {
            eprintln!("waiting: {:?} {:?} {:?}", s.by_state, s.by_status, s.events);
            last_print = Instant::now();
        }
        if s.state("done") + s.state("failed") >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not final in time: {:?} {:?}",
            s.by_state,
            s.by_status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The verifier on the provider's log, against what courier recorded (the
/// rig's judge, as demo and chaos use it).
pub async fn verify(store: &PgStore, log: &Path) -> Report {
    courier_rig::judge::verify_against(store, log)
        .await
        .unwrap()
}
