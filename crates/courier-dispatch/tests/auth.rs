//! Who may send, against a real PostgreSQL: store tokens reach only their
//! stores, admin tokens everything an operator reads, two tokens of a store
//! are valid at once, a revocation reaches every server process within a
//! second, two webhook secrets are accepted during a rotation, and every bad
//! credential gets a clear 4xx, is counted, and changes nothing.

use axum::Router;
use courier_core::Limits;
use courier_dispatch::auth::{secret_new, token_text, Auth, REFRESH_MS};
use courier_dispatch::server::{router_with_auth, ServerConfig};
use courier_provider::signature;
use courier_store::PgStore;
use courier_testkit::fixtures::new_action;
use courier_testkit::{fresh_db, TestDb};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"webhook-new";
const OLD_SECRET: &[u8] = b"webhook-old";

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// One server process's API: tokens required (none open), the token
/// table's tokens only, and an admin token when given.
async fn server(store: &PgStore, admin: Option<&str>) -> String {
    let cfg = ServerConfig {
        limits: Limits::default(),
        webhook_secret: SECRET.to_vec(),
        webhook_secrets_previous: vec![OLD_SECRET.to_vec()],
        api_token: admin.map(String::from),
        request_timeout: Duration::from_secs(10),
        provider_webhooks: Default::default(),
    };
    let auth = Auth::start(store.clone(), cfg.api_token.clone(), false);
    let metrics = courier_dispatch::metrics::recorder().unwrap();
    let app = router_with_auth(store.clone(), cfg, auth.clone())
        .merge(courier_dispatch::metrics::router(metrics, auth));
    serve(app).await
}

async fn token(store: &PgStore, stores: &[&str]) -> (i64, String) {
    let (secret, sha) = secret_new();
    let stores: Vec<String> = stores.iter().map(|s| s.to_string()).collect();
    let id = store
        .token_create("test", stores.is_empty(), &stores, &sha)
        .await
        .unwrap();
    (id, token_text(id, &secret))
}

struct Answer {
    status: u16,
    body: Value,
}

async fn call(method: &str, url: &str, auth: Option<&str>, body: Option<Value>) -> Answer {
    let http = reqwest::Client::new();
    let mut req = if method == "GET" {
        http.get(url)
    } else {
        http.post(url)
    };
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn action(store: &str, key: &str) -> Value {
    json!({"store": store, "to": "+15551234567", "body": "hi", "key": key})
}

/// Waits until the server accepts `token` (its first load of the tokens).
async fn until_accepted(api: &str, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let a = call(
            "GET",
            &format!("{api}/v1/actions/0"),
            Some(&bearer(token)),
            None,
        )
        .await;
        if a.status == 404 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the token was never accepted: {}",
            a.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rows of every table a request could write.
async fn tables(db: &TestDb) -> Vec<i64> {
    let c = db.raw_client().await;
    let mut out = Vec::new();
    for t in [
        "actions",
        "stores",
        "outbox",
        "webhook_events",
        "api_tokens",
        "events",
    ] {
        out.push(
            c.query_one(&format!("SELECT count(*) FROM {t}"), &[])
                .await
                .unwrap()
                .get(0),
        );
    }
    out
}

#[tokio::test]
async fn a_store_token_enqueues_and_reads_only_its_own_stores() {
    let db = fresh_db().await;
    let (_, t1) = token(&db.store, &["s1", "s1b"]).await;
    let api = server(&db.store, None).await;
    until_accepted(&api, &t1).await;
    let auth = bearer(&t1);
    let mine = call(
        "POST",
        &format!("{api}/v1/actions"),
        Some(&auth),
        Some(action("s1", "k1")),
    )
    .await;
    assert_eq!(mine.status, 201, "{}", mine.body);
    let id = mine.body["id"].as_i64().unwrap();
    let read = call("GET", &format!("{api}/v1/actions/{id}"), Some(&auth), None).await;
    assert_eq!(read.status, 200);

    // Another store's action, enqueued by someone else: as if it did not exist.
    let theirs = db
        .store
        .action_enqueue(&new_action("s2", 1))
        .await
        .unwrap()
        .id();
    let before = tables(&db).await;
    let read = call(
        "GET",
        &format!("{api}/v1/actions/{theirs}"),
        Some(&auth),
        None,
    )
    .await;
    let none = call(
        "GET",
        &format!("{api}/v1/actions/424242"),
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(
        (read.status, read.body["error"].clone()),
        (404, json!("not_found"))
    );
    assert_eq!(
        (none.status, none.body["error"].clone()),
        (404, json!("not_found"))
    );
    // Enqueuing for another store: 403, single or in a batch (index named).
    let other = call(
        "POST",
        &format!("{api}/v1/actions"),
        Some(&auth),
        Some(action("s2", "k2")),
    )
    .await;
    assert_eq!(
        (other.status, other.body["error"].clone()),
        (403, json!("forbidden_store"))
    );
    let batch = json!({"actions": [action("s1", "k3"), action("s2", "k4")]});
    let other = call(
        "POST",
        &format!("{api}/v1/actions:batch"),
        Some(&auth),
        Some(batch),
    )
    .await;
    assert_eq!((other.status, other.body["index"].clone()), (403, json!(1)));
    // What operators read needs an admin token.
    let metrics = call("GET", &format!("{api}/metrics"), Some(&auth), None).await;
    assert_eq!(
        (metrics.status, metrics.body["error"].clone()),
        (403, json!("admin_only"))
    );
    assert_eq!(tables(&db).await, before);
}

#[tokio::test]
async fn an_admin_token_reads_every_store_and_the_metrics() {
    let db = fresh_db().await;
    let (_, admin) = token(&db.store, &[]).await;
    let api = server(&db.store, Some("flag-admin-token")).await;
    until_accepted(&api, &admin).await;
    let id = db
        .store
        .action_enqueue(&new_action("s9", 1))
        .await
        .unwrap()
        .id();
    for t in [admin.as_str(), "flag-admin-token"] {
        let read = call(
            "GET",
            &format!("{api}/v1/actions/{id}"),
            Some(&bearer(t)),
            None,
        )
        .await;
        assert_eq!(read.status, 200, "{t}");
        let m = call("GET", &format!("{api}/metrics"), Some(&bearer(t)), None).await;
        assert_eq!(m.status, 200, "{t}");
    }
}

#[tokio::test]
async fn two_tokens_of_a_store_hold_at_once_and_a_revocation_reaches_every_server_within_a_second()
{
    let db = fresh_db().await;
    let (old_id, old) = token(&db.store, &["s1"]).await;
    let (_, new) = token(&db.store, &["s1"]).await;
    // Two server processes' worth of state: each its own copy of the tokens.
    let a = server(&db.store, None).await;
    let b = server(&db.store, None).await;
    for api in [&a, &b] {
        until_accepted(api, &old).await;
        until_accepted(api, &new).await;
    }
    assert!(db.store.token_revoke(old_id).await.unwrap());
    let revoked_at = Instant::now();
    for api in [&a, &b] {
        loop {
            let r = call(
                "GET",
                &format!("{api}/v1/actions/0"),
                Some(&bearer(&old)),
                None,
            )
            .await;
            if r.status == 401 {
                break;
            }
            assert!(
                revoked_at.elapsed() < Duration::from_secs(1),
                "a revoked token still worked after 1 s (polled every {REFRESH_MS} ms)"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = call(
            "GET",
            &format!("{api}/v1/actions/0"),
            Some(&bearer(&new)),
            None,
        )
        .await;
        assert_eq!(r.status, 404, "the other token of the store still works");
    }
    assert!(revoked_at.elapsed() < Duration::from_secs(1));
    // Revoked twice: nothing to revoke.
    assert!(!db.store.token_revoke(old_id).await.unwrap());
}

#[tokio::test]
async fn bad_credentials_get_a_clear_4xx_are_counted_and_change_nothing() {
    let db = fresh_db().await;
    let (revoked_id, revoked) = token(&db.store, &["s1"]).await;
    let (_, good) = token(&db.store, &["s1"]).await;
    db.store.token_revoke(revoked_id).await.unwrap();
    let api = server(&db.store, None).await;
    until_accepted(&api, &good).await;
    let before = tables(&db).await;
    let metrics = courier_dispatch::metrics::recorder().unwrap();
    let failures = || -> f64 {
        metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("courier_auth_failures_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let counted_before = failures();
    let enqueue = format!("{api}/v1/actions");
    let (secret, _) = secret_new();
    let never_issued = token_text(999_999, &secret);
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        ("no header", enqueue.clone(), None, 401, "unauthorized"),
        (
            "revoked",
            enqueue.clone(),
            Some(bearer(&revoked)),
            401,
            "unauthorized",
        ),
        (
            "never issued",
            enqueue.clone(),
            Some(bearer(&never_issued)),
            401,
            "unauthorized",
        ),
        (
            "not a token",
            enqueue.clone(),
            Some(bearer("hello")),
            401,
            "unauthorized",
        ),
        (
            "wrong secret",
            enqueue.clone(),
            Some(bearer(&format!("{}x", &good[..good.len() - 1]))),
            401,
            "unauthorized",
        ),
        (
            "basic auth",
            enqueue.clone(),
            Some("Basic dXNlcjpwYXNz".into()),
            401,
            "bad_authorization",
        ),
        (
            "empty bearer",
            enqueue.clone(),
            Some("Bearer ".into()),
            401,
            "bad_authorization",
        ),
        (
            "lower-case scheme",
            enqueue.clone(),
            Some(format!("bearer {good}")),
            401,
            "bad_authorization",
        ),
        (
            "token in the query",
            format!("{enqueue}?access_token={good}"),
            None,
            400,
            "token_in_query",
        ),
        (
            "token in the query, with a header",
            format!("{enqueue}?token={good}"),
            Some(bearer(&good)),
            400,
            "token_in_query",
        ),
    ];
    let n = cases.len();
    for (name, url, auth, status, code) in cases {
        let a = call("POST", &url, auth.as_deref(), Some(action("s1", "k"))).await;
        assert_eq!(
            (a.status, a.body["error"].clone()),
            (status, json!(code)),
            "{name}: {}",
            a.body
        );
    }
    // A token for a store name that fails validation is never made.
    let (_, sha) = secret_new();
    let bad = db
        .store
        .token_create("bad", false, &["a b".to_string()], &sha)
        .await;
    assert!(
        matches!(bad, Err(courier_store::TokenError::Invalid(_))),
        "{bad:?}"
    );
    assert_eq!(tables(&db).await, before);
    assert_eq!(
        failures() - counted_before,
        n as f64,
        "every failure counted"
    );
}

#[tokio::test]
async fn webhooks_signed_with_the_new_or_the_previous_secret_are_accepted() {
    let db = fresh_db().await;
    let api = server(&db.store, None).await;
    let body = json!({"event_id": "e1", "message_id": "m1", "key": "courier-unknown",
                      "status": "sent", "occurred_at": "2026-01-01T00:00:00Z"})
    .to_string();
    let http = reqwest::Client::new();
    let mut statuses = Vec::new();
    for secret in [SECRET, OLD_SECRET, b"another".as_slice()] {
        let r = http
            .post(format!("{api}/v1/webhooks/provider"))
            .header("x-signature", signature::sign(secret, body.as_bytes()))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    // Signed with either secret: past the signature (no intent has the key).
    assert_eq!(statuses, vec![404, 404, 401]);
}

#[tokio::test]
async fn an_unauthenticated_request_is_refused_before_its_body_is_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = fresh_db().await;
    let api = server(&db.store, None).await;
    let addr = api.trim_start_matches("http://");
    // A body declared at 1 MB of which nothing is sent: reading it would
    // wait for the request time-out (10 s); the check answers at once.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /v1/actions:batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000000\r\n\r\n{",
    )
    .await
    .unwrap();
    let started = Instant::now();
    let mut head = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut head))
        .await
        .expect("answered without the body")
        .unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert!(started.elapsed() < Duration::from_secs(2));
}
