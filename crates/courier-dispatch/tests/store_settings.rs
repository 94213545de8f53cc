//! A store's and a provider's flow-control settings through the HTTP API,
//! against a real PostgreSQL: set and read back, admin tokens only, every
//! refusal names its field and changes nothing, and the next claim obeys a
//! change.

use courier_core::Limits;
use courier_dispatch::server::{router, ServerConfig};
use courier_store::{ClaimMode, ClaimReq, PgStore};
use courier_testkit::{fixtures, fresh_db};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "settings-admin-token";

/// The API with the admin token [`TOKEN`]; its base URL.
async fn start(store: PgStore) -> String {
    let app = router(
        store,
        ServerConfig {
            limits: Limits::default(),
            webhook_secret: b"settings-secret".to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: Some(TOKEN.to_string()),
            request_timeout: Duration::from_secs(10),
            provider_webhooks: Default::default(),
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// One request with `token`: its status and JSON answer.
async fn call(method: &str, url: &str, token: &str, body: Option<&str>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let mut req = match method {
        "PUT" => http.put(url),
        _ => http.get(url),
    }
    .bearer_auth(token);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn events_of(store: &PgStore, kind: &str) -> Vec<String> {
    fixtures::column(
        store,
        &format!("SELECT detail FROM events WHERE kind = '{kind}' ORDER BY id"),
    )
    .await
}

/// A store token for `stores`, once the server at `api` has loaded it.
async fn store_token(store: &PgStore, api: &str, stores: &[&str]) -> String {
    let (secret, sha) = courier_dispatch::auth::secret_new();
    let names: Vec<String> = stores.iter().map(|s| s.to_string()).collect();
    let id = store
        .token_create("tenant", false, &names, &sha)
        .await
        .unwrap();
    let token = courier_dispatch::auth::token_text(id, &secret);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _) = call("GET", &format!("{api}/v1/actions/0"), &token, None).await;
        if status == 404 {
            return token;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the token was never loaded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn store_settings_put_then_get_round_trip_with_an_events_row() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let url = format!("{api}/v1/stores/shop-1");
    let (status, put) = call(
        "PUT",
        &url,
        TOKEN,
        Some(r#"{"rate_per_s": 5, "burst": 10, "in_flight_max": 2}"#),
    )
    .await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(
        put["settings"],
        json!({"rate_per_s": 5.0, "burst": 10, "in_flight_max": 2})
    );
    assert_eq!(put["store"], "shop-1");
    assert_eq!(put["in_flight"], 0);
    assert_eq!(put["tokens"], 10.0, "a new bucket is full");
    assert!(put["configured_at"].is_string(), "{put}");
    let (status, got) = call("GET", &url, TOKEN, None).await;
    assert_eq!(status, 200);
    assert_eq!(got["settings"], put["settings"]);
    // The answer is the store's view, field for field.
    let view = db.store.store_flow("shop-1").await.unwrap().unwrap();
    let mut want = serde_json::to_value(&view).unwrap();
    want["tokens"] = got["tokens"].clone();
    assert_eq!(got, want);

    // A number without a fraction is an integer however it is written.
    let (status, put) = call(
        "PUT",
        &url,
        TOKEN,
        Some(r#"{"rate_per_s": 5, "burst": 10.0, "in_flight_max": 2e0}"#),
    )
    .await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(
        put["settings"],
        json!({"rate_per_s": 5.0, "burst": 10, "in_flight_max": 2})
    );

    // PUT replaces all three: a field left out goes back to its default;
    // a rate alone gets one second's worth of burst.
    let (status, put) = call("PUT", &url, TOKEN, Some(r#"{"rate_per_s": 2.5}"#)).await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(
        put["settings"],
        json!({"rate_per_s": 2.5, "burst": 3, "in_flight_max": null})
    );
    let events = events_of(&db.store, "store_settings").await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e.contains("store=shop-1") && e.contains("by=admin")),
        "{events:?}"
    );

    // The list has it; a store with only defaults is not configured.
    let (status, _) = call("PUT", &format!("{api}/v1/stores/plain"), TOKEN, Some("{}")).await;
    assert_eq!(status, 200);
    let (status, list) = call("GET", &format!("{api}/v1/stores"), TOKEN, None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["truncated"], false);
    let names: Vec<&str> = list["stores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["store"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shop-1"]);
}

#[tokio::test]
async fn store_settings_refuse_a_negative_rate_a_zero_burst_and_an_unknown_field_and_change_nothing(
) {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let url = format!("{api}/v1/stores/s1");
    let (status, before) = call(
        "PUT",
        &url,
        TOKEN,
        Some(r#"{"rate_per_s": 5, "burst": 10, "in_flight_max": 2}"#),
    )
    .await;
    assert_eq!(status, 200, "{before}");
    let events = events_of(&db.store, "store_settings").await;
    // (name, path, body, error, field)
    let cases: Vec<(&str, String, &str, &str, Option<&str>)> = vec![
        (
            "a negative rate",
            url.clone(),
            r#"{"rate_per_s": -1}"#,
            "bad_settings",
            Some("rate_per_s"),
        ),
        (
            "a zero rate",
            url.clone(),
            r#"{"rate_per_s": 0}"#,
            "bad_settings",
            Some("rate_per_s"),
        ),
        (
            "a zero burst",
            url.clone(),
            r#"{"rate_per_s": 5, "burst": 0}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "a negative burst",
            url.clone(),
            r#"{"rate_per_s": 5, "burst": -3}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "a burst over its bound",
            url.clone(),
            r#"{"rate_per_s": 5, "burst": 100001}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "a burst without a rate",
            url.clone(),
            r#"{"burst": 4}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "a zero in-flight cap",
            url.clone(),
            r#"{"in_flight_max": 0}"#,
            "bad_settings",
            Some("in_flight_max"),
        ),
        (
            "a rate as text",
            url.clone(),
            r#"{"rate_per_s": "5"}"#,
            "bad_settings",
            Some("rate_per_s"),
        ),
        (
            "a fractional cap",
            url.clone(),
            r#"{"in_flight_max": 1.5}"#,
            "bad_settings",
            Some("in_flight_max"),
        ),
        (
            "an unknown field",
            url.clone(),
            r#"{"rate_per_s": 5, "rate": 5}"#,
            "bad_settings",
            Some("rate"),
        ),
        (
            "a field given twice",
            url.clone(),
            r#"{"rate_per_s": 5, "rate_per_s": 6}"#,
            "bad_json",
            Some("rate_per_s"),
        ),
        ("an array", url.clone(), "[5, 10, 2]", "bad_json", None),
        ("a number", url.clone(), "5", "bad_json", None),
        ("null", url.clone(), "null", "bad_json", None),
        (
            "malformed JSON",
            url.clone(),
            r#"{"rate_per_s": "#,
            "bad_json",
            None,
        ),
        ("no body", url.clone(), "", "bad_json", None),
        (
            "a bad store name",
            format!("{api}/v1/stores/a%20b"),
            r#"{"rate_per_s": 5}"#,
            "bad_store",
            Some("store"),
        ),
        (
            "a long store name",
            format!("{api}/v1/stores/{}", "s".repeat(65)),
            "{}",
            "bad_store",
            Some("store"),
        ),
        (
            "a store name that is not UTF-8",
            format!("{api}/v1/stores/%FF"),
            "{}",
            "bad_store",
            Some("store"),
        ),
    ];
    for (name, path, body, error, field) in cases {
        let (status, v) = call("PUT", &path, TOKEN, Some(body)).await;
        assert_eq!(status, 400, "{name}: {v}");
        assert_eq!(v["error"], error, "{name}: {v}");
        assert_eq!(v["field"].as_str(), field, "{name}: {v}");
        let (_, after) = call("GET", &url, TOKEN, None).await;
        assert_eq!(
            after["settings"], before["settings"],
            "{name} changed the settings"
        );
    }
    assert_eq!(events_of(&db.store, "store_settings").await, events);
    assert!(db.store.store_flow("a b").await.unwrap().is_none());
}

#[tokio::test]
async fn a_store_token_is_refused_every_settings_route_and_changes_nothing() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let tenant = store_token(&db.store, &api, &["s1"]).await;
    let stores_before = fixtures::column::<i64>(&db.store, "SELECT count(*) FROM stores").await;
    for (method, path, body) in [
        ("PUT", "/v1/stores/s1", Some(r#"{"rate_per_s": 5}"#)),
        ("GET", "/v1/stores/s1", None),
        ("GET", "/v1/stores", None),
        (
            "PUT",
            "/v1/providers/contract",
            Some(r#"{"rate_per_s": 5}"#),
        ),
        ("GET", "/v1/providers/contract", None),
    ] {
        let (status, v) = call(method, &format!("{api}{path}"), &tenant, body).await;
        assert_eq!(status, 403, "{method} {path}: {v}");
        assert_eq!(v["error"], "admin_only", "{method} {path}: {v}");
        let (status, _) = call(method, &format!("{api}{path}"), "wrong", body).await;
        assert_eq!(status, 401, "{method} {path}");
    }
    assert_eq!(
        fixtures::column::<i64>(&db.store, "SELECT count(*) FROM stores").await,
        stores_before
    );
    assert!(events_of(&db.store, "store_settings").await.is_empty());
    assert!(events_of(&db.store, "provider_settings").await.is_empty());
}

#[tokio::test]
async fn an_unknown_store_is_404_and_one_seen_by_an_enqueue_has_the_defaults() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let (status, v) = call("GET", &format!("{api}/v1/stores/never"), TOKEN, None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("not_found")),
        "{v}"
    );
    fixtures::enqueued(&db.store, "seen", 1).await;
    let (status, v) = call("GET", &format!("{api}/v1/stores/seen"), TOKEN, None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["settings"],
        json!({"rate_per_s": null, "burst": null, "in_flight_max": null})
    );
    assert_eq!(
        (v["tokens"].clone(), v["configured_at"].clone()),
        (Value::Null, Value::Null)
    );
}

#[tokio::test]
async fn a_settings_change_through_the_api_is_obeyed_by_the_next_claim() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let url = format!("{api}/v1/stores/capped");
    let (status, v) = call("PUT", &url, TOKEN, Some(r#"{"in_flight_max": 1}"#)).await;
    assert_eq!(status, 200, "{v}");
    fixtures::enqueued(&db.store, "capped", 5).await;
    let req = ClaimReq {
        owner: Arc::from("w1"),
        n: 10,
        lease_ttl_ms: fixtures::LONG_LEASE_MS,
        // The worker's default cap; the store's own cap of 1 is lower.
        store_in_flight_max: 4,
        mode: ClaimMode::Fair,
        intents: true,
        provider: None,
        reclaim: false,
    };
    let taken = fixtures::claim_swept(&db.store, &req).await.unwrap();
    assert_eq!(taken.len(), 1, "a cap of 1 lets one action out");
    let (_, v) = call("GET", &url, TOKEN, None).await;
    assert_eq!(v["in_flight"], 1, "{v}");
    // Raised to 3: the next claim takes two more, and no more.
    let (status, _) = call("PUT", &url, TOKEN, Some(r#"{"in_flight_max": 3}"#)).await;
    assert_eq!(status, 200);
    let taken = fixtures::claim_swept(&db.store, &req).await.unwrap();
    assert_eq!(taken.len(), 2);
    assert!(fixtures::claim_swept(&db.store, &req)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_providers_ceiling_round_trips_and_an_unknown_gate_is_404() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let url = format!("{api}/v1/providers/contract");
    let (status, v) = call("GET", &url, TOKEN, None).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("not_found")),
        "{v}"
    );
    let (status, put) = call("PUT", &url, TOKEN, Some(r#"{"rate_per_s": 50}"#)).await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(put["settings"], json!({"rate_per_s": 50.0, "burst": 50}));
    assert_eq!(
        (put["paused_ms"].clone(), put["pauses"].clone()),
        (Value::Null, json!(0))
    );
    let (status, got) = call("GET", &url, TOKEN, None).await;
    assert_eq!(status, 200);
    assert_eq!(got["settings"], put["settings"]);
    // A pause shows in the gate.
    db.store.provider_pause("contract", 60_000).await.unwrap();
    let (_, got) = call("GET", &url, TOKEN, None).await;
    let paused = got["paused_ms"].as_u64().unwrap();
    assert!((50_000..=60_000).contains(&paused), "{got}");
    assert_eq!(got["pauses"], 1);
    // Refusals name their field and change nothing.
    for (body, field) in [
        (r#"{"rate_per_s": -1}"#, "rate_per_s"),
        (r#"{"burst": 3}"#, "burst"),
        (r#"{"in_flight_max": 3}"#, "in_flight_max"),
    ] {
        let (status, v) = call("PUT", &url, TOKEN, Some(body)).await;
        assert_eq!(
            (status, v["field"].as_str()),
            (400, Some(field)),
            "{body}: {v}"
        );
    }
    let (status, v) = call(
        "PUT",
        &format!("{api}/v1/providers/a%2Fb"),
        TOKEN,
        Some("{}"),
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str(), v["field"].as_str()),
        (400, Some("bad_provider"), Some("provider")),
        "{v}"
    );
    let (_, after) = call("GET", &url, TOKEN, None).await;
    assert_eq!(after["settings"], put["settings"]);
    assert_eq!(events_of(&db.store, "provider_settings").await.len(), 1);
}
