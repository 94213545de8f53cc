//! The HTTP API against a real PostgreSQL: bad input is refused with a JSON
//! 4xx and changes nothing; enqueue is idempotent; forged webhooks change nothing.

use courier_core::{ActionState, Limits, Status};
use courier_dispatch::server::{router, ServerConfig};
use courier_provider::signature;
use courier_store::PgStore;
use courier_testkit::{fixtures, fresh_db};
use serde_json::{json, Value};
use std::time::Duration;

const SECRET: &[u8] = b"test-secret";

async fn start(store: PgStore, token: Option<&str>) -> String {
    let app = router(
        store,
        ServerConfig {
            limits: Limits::default(),
            webhook_secret: SECRET.to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: token.map(str::to_string),
            request_timeout: Duration::from_secs(10),
            provider_webhooks: Default::default(),
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn good() -> Value {
    json!({"store": "s1", "to": "+15551234567", "body": "hello", "key": "k1"})
}

async fn post_raw(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let v = resp.json::<Value>().await.unwrap_or(Value::Null);
    (code, v)
}

#[tokio::test]
async fn bad_enqueues_get_a_json_4xx_and_change_nothing() {
    let db = fresh_db().await;
    let api = start(db.store.clone(), None).await;
    let url = format!("{api}/v1/actions");
    let with = |k: &str, v: Value| {
        let mut g = good();
        g[k] = v;
        g.to_string()
    };
    let cases: Vec<(&str, String, u16)> = vec![
        (
            "unknown field",
            {
                let mut g = good();
                g["priority"] = json!(1);
                g.to_string()
            },
            400,
        ),
        ("empty body", with("body", json!("")), 400),
        ("oversized body", with("body", json!("x".repeat(1601))), 400),
        ("bad number", with("to", json!("555-1234")), 400),
        (
            "number not a string",
            with("to", json!(15551234567u64)),
            400,
        ),
        ("bad store", with("store", json!("a b")), 400),
        ("empty store", with("store", json!("")), 400),
        ("long key", with("key", json!("k".repeat(256))), 400),
        ("non-ascii key", with("key", json!("ключ")), 400),
        ("bad json", "{\"store\": ".to_string(), 400),
        ("not an object", "[1,2]".to_string(), 400),
        (
            "one MiB",
            format!(
                "{{\"store\":\"s1\",\"to\":\"+15551234567\",\"body\":\"{}\"}}",
                "x".repeat(1 << 20)
            ),
            413,
        ),
    ];
    for (name, body, want) in cases {
        let (code, v) = post_raw(&url, body).await;
        assert_eq!(code, want, "{name}: {v}");
        assert!(v["error"].is_string(), "{name}: no JSON error: {v}");
    }
    // Malformed UTF-8.
    let (code, _) = post_raw(&url, vec![b'{', 0xff, 0xfe, b'}']).await;
    assert_eq!(code, 400);
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);
}

#[tokio::test]
async fn enqueue_through_the_api_is_idempotent() {
    let db = fresh_db().await;
    let api = start(db.store.clone(), None).await;
    let url = format!("{api}/v1/actions");
    let http = reqwest::Client::new();
    let first = http.post(&url).json(&good()).send().await.unwrap();
    assert_eq!(first.status().as_u16(), 201);
    let first: Value = first.json().await.unwrap();
    let again = http.post(&url).json(&good()).send().await.unwrap();
    assert_eq!(again.status().as_u16(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(first["id"], again["id"]);
    let mut changed = good();
    changed["body"] = json!("another text");
    let resp = http.post(&url).json(&changed).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 1);
    // Reading it back.
    let id = first["id"].as_i64().unwrap();
    let got: Value = http
        .get(format!("{url}/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["state"], "pending");
    assert_eq!(
        http.get(format!("{url}/999999"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    assert_eq!(
        http.get(format!("{url}/abc"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        400
    );
}

#[tokio::test]
async fn the_api_token_is_required_when_configured() {
    let db = fresh_db().await;
    let api = start(db.store.clone(), Some("t0ken")).await;
    let url = format!("{api}/v1/actions");
    let http = reqwest::Client::new();
    let resp = http.post(&url).json(&good()).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let resp = http
        .post(&url)
        .bearer_auth("wrong")
        .json(&good())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);
    let resp = http
        .post(&url)
        .bearer_auth("t0ken")
        .json(&good())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
}

#[tokio::test]
async fn a_forged_webhook_changes_nothing() {
    let db = fresh_db().await;
    let api = start(db.store.clone(), None).await;
    let http = reqwest::Client::new();
    // A dispatched action.
    http.post(format!("{api}/v1/actions"))
        .json(&good())
        .send()
        .await
        .unwrap();
    let held = fixtures::settled(&db.store).await;
    let key = held.key.clone();
    let event = json!({"event_id": "evt_1", "message_id": "msg_1", "key": key,
                       "status": "delivered", "occurred_at": "2026-01-01T00:00:00Z"})
    .to_string();
    let hook = format!("{api}/v1/webhooks/provider");
    let forged = [
        None,
        Some(signature::sign(b"wrong-secret", event.as_bytes())),
        Some("sha256=00".to_string()),
        Some(signature::sign(SECRET, b"another body")),
    ];
    for sig in forged {
        let mut req = http.post(&hook).body(event.clone());
        if let Some(s) = &sig {
            req = req.header("x-signature", s);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{sig:?}");
    }
    let view = db
        .store
        .action_get(held.lease.action_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, Some(Status::Accepted));
    assert_eq!(view.state, ActionState::Dispatched);
    // The genuine one is merged, once.
    for expected in ["advanced", "duplicate"] {
        let resp = http
            .post(&hook)
            .header("x-signature", signature::sign(SECRET, event.as_bytes()))
            .body(event.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["outcome"], expected);
    }
    let view = db
        .store
        .action_get(held.lease.action_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, Some(Status::Delivered));
    assert_eq!(view.state, ActionState::Done);
}

#[tokio::test]
async fn health_unknown_routes_and_nul_get_clear_answers() {
    let db = fresh_db().await;
    let api = start(db.store.clone(), None).await;
    let http = reqwest::Client::new();
    let r = http.get(format!("{api}/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = http.get(format!("{api}/nope")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "no_route");
    let r = http
        .delete(format!("{api}/v1/actions"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "method_not_allowed"
    );
    // PostgreSQL's text cannot hold NUL: a 400, not a failed insert.
    let mut g = good();
    g["body"] = json!("a\u{0}b");
    let (code, v) = post_raw(&format!("{api}/v1/actions"), g.to_string()).await;
    assert_eq!((code, v["error"].as_str()), (400, Some("bad_body")));
    // A declared length over the limit is refused before the body is read.
    let (code, v) = post_raw(&format!("{api}/v1/actions"), vec![b' '; 70_000]).await;
    assert_eq!(
        (code, v["error"].as_str()),
        (413, Some("payload_too_large"))
    );
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);
}

/// Every table's rows, for "changes nothing".
async fn actions_total(store: &PgStore) -> i64 {
    store.summary(1800).await.unwrap().total()
}

#[tokio::test]
async fn a_batch_answers_per_item_in_order() {
    let db = fresh_db().await;
    let api = start(db.store.clone(), None).await;
    let url = format!("{api}/v1/actions:batch");
    let item = |store: &str, key: Option<&str>| json!({"store": store, "to": "+15551234567", "body": "hi", "key": key});
    let (code, v) = post_raw(
        &url,
        json!({"actions": [item("s1", Some("a")), item("s2", None), item("s1", Some("a"))]})
            .to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    let items = v["actions"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(
        (items[0]["created"].clone(), items[2]["created"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(items[0]["id"], items[2]["id"], "a repeat inside the batch");
    assert_eq!(actions_total(&db.store).await, 2);
    // The single read shows a batch's action like any other.
    let one: Value = reqwest::get(format!("{api}/v1/actions/{}", items[1]["id"]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one["store"], "s2");
}

#[tokio::test]
async fn a_bad_batch_is_named_by_index_and_field_and_enqueues_nothing() {
    let db = fresh_db().await;
    let api = start(db.store.clone(), None).await;
    let url = format!("{api}/v1/actions:batch");
    let good = |i: usize| json!({"store": "s1", "to": "+15551234567", "body": format!("m{i}")});
    for at in 0..4 {
        let mut items: Vec<Value> = (0..4).map(good).collect();
        items[at]["to"] = json!("hello");
        let (code, v) = post_raw(&url, json!({ "actions": items }).to_string()).await;
        assert_eq!(code, 400, "{v}");
        assert_eq!(
            (v["error"].clone(), v["field"].clone(), v["index"].clone()),
            (json!("bad_phone"), json!("to"), json!(at)),
            "{v}"
        );
    }
    // A key reused with other content, inside the batch: 422, its index.
    let keyed =
        |k: &str, body: &str| json!({"store": "s1", "to": "+15551234567", "body": body, "key": k});
    let (code, v) = post_raw(
        &url,
        json!({"actions": [keyed("k", "a"), good(1), keyed("k", "b")]}).to_string(),
    )
    .await;
    assert_eq!(
        (code, v["error"].clone(), v["index"].clone()),
        (422, json!("key_reused"), json!(2))
    );
    // Unknown fields, in the batch or an item.
    let (code, _) = post_raw(&url, json!({"actions": [], "x": 1}).to_string()).await;
    assert_eq!(code, 400);
    let mut odd = good(1);
    odd["priority"] = json!("high");
    let (code, _) = post_raw(&url, json!({ "actions": [odd] }).to_string()).await;
    assert_eq!(code, 400);
    assert_eq!(actions_total(&db.store).await, 0);
}

#[tokio::test]
async fn a_batch_takes_its_maximum_and_refuses_one_more() {
    let db = fresh_db().await;
    let limits = Limits {
        enqueue_batch_max: 50,
        ..Limits::default()
    };
    let app = router(
        db.store.clone(),
        ServerConfig {
            limits,
            webhook_secret: SECRET.to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: None,
            request_timeout: Duration::from_secs(10),
            provider_webhooks: Default::default(),
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let url = format!("http://{addr}/v1/actions:batch");
    let items = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"store": "s1", "to": "+15551234567", "body": format!("m{i}")}))
            .collect()
    };
    let (code, v) = post_raw(&url, json!({ "actions": items(51) }).to_string()).await;
    assert_eq!(
        (code, v["error"].clone(), v["field"].clone()),
        (400, json!("too_many_actions"), json!("actions"))
    );
    assert_eq!(actions_total(&db.store).await, 0);
    let (code, v) = post_raw(&url, json!({ "actions": items(50) }).to_string()).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(actions_total(&db.store).await, 50);
}
