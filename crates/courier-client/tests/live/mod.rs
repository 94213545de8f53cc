//! A live courier API for the client's tests: the server's own router (and
//! its `/openapi.json`) on a loopback port, over a fresh database of the
//! test PostgreSQL.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use courier_core::Limits;
use courier_dispatch::server::{router, ServerConfig};
use courier_store::PgStore;
use courier_testkit::fresh_db;
use std::time::Duration;

/// The admin token the live server is configured with (`api_token`).
pub const TOKEN: &str = "client-test-token";

pub struct Live {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    pub store: PgStore,
}

/// Starts the API with `api_token = Some(TOKEN)` over a fresh database.
pub async fn start() -> Live {
    let db = fresh_db().await;
    let cfg = ServerConfig {
        limits: Limits::default(),
        webhook_secret: b"client-test-secret".to_vec(),
        webhook_secrets_previous: Vec::new(),
        api_token: Some(TOKEN.to_string()),
        request_timeout: Duration::from_secs(10),
        provider_webhooks: Default::default(),
    };
    let app = router(db.store.clone(), cfg).merge(courier_dispatch::openapi::router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Live {
        url: format!("http://{addr}"),
        store: db.store,
    }
}

impl Live {
    /// A new store token naming `stores` (`courier token create`), once
    /// the server has loaded it.
    pub async fn store_token(&self, stores: &[&str]) -> String {
        let (secret, sha) = courier_dispatch::auth::secret_new();
        let stores: Vec<String> = stores.iter().map(|s| s.to_string()).collect();
        let id = self
            .store
            .token_create("client-test", false, &stores, &sha)
            .await
            .unwrap();
        let token = courier_dispatch::auth::token_text(id, &secret);
        let client = courier_client::Client::new(&self.url, Some(token.clone())).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while client.get(0).await.is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the token was never loaded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        token
    }
}

/// A loopback port that refuses connections: bound but not listening, so
/// no other process can take it while the socket lives. Returns the socket
/// (keep it) and its URL.
pub fn closed_port() -> (tokio::net::TcpSocket, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, format!("http://{addr}"))
}
