//! Time and intent under hostile input, against the real `courier serve`
//! process: schedules out of their limits, cancels of what a token may not
//! touch or what has ended, re-drives of what may have had an effect. Each
//! gets a clear 4xx, and every table is as it was.

#[path = "hostile/live.rs"]
mod live;

use courier_core::Status;
use courier_store::PgStore;
use courier_testkit::fixtures;
use live::{db_state, fresh_db, Service};
use serde_json::{json, Value};
use std::time::Duration;

const SECRET: &str = "hostile-secret";
const ADMIN: &str = "hostile-admin-0123456789";

struct Live {
    _server: Service,
    base: String,
    store: PgStore,
    http: reqwest::Client,
    /// A store token for `s-other`.
    other: String,
}

impl Live {
    async fn start() -> Live {
        let (url, store) = fresh_db("intent").await;
        let server = Service::start(
            "serve",
            &[
                "serve",
                "--database-url",
                &url,
                "--listen",
                "127.0.0.1:0",
                "--webhook-secret",
                SECRET,
                "--api-token",
                ADMIN,
            ],
            true,
        );
        let base = server.url.clone();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let (secret, sha) = courier_dispatch::auth::secret_new();
        let id = store
            .token_create("tenant-other", false, &["s-other".to_string()], &sha)
            .await
            .unwrap();
        let other = courier_dispatch::auth::token_text(id, &secret);
        // The server loads new tokens within a refresh: wait for this one.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r = http
                .get(format!("{base}/v1/actions/0"))
                .bearer_auth(&other)
                .send()
                .await
                .unwrap();
            if r.status().as_u16() == 404 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the token never loaded"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Live {
            _server: server,
            base,
            store,
            http,
            other,
        }
    }

    async fn post(&self, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

fn at(s: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(s)).to_rfc3339()
}

#[tokio::test]
async fn hostile_times_cancels_and_redrives_get_a_4xx_and_change_nothing() {
    let live = Live::start().await;
    let store = &live.store;
    // What there is: a pending action of s1, a cancelled one, one the
    // provider has (dispatched), and one delivered.
    let pending = store
        .action_enqueue(&fixtures::new_action("s1", 0))
        .await
        .unwrap()
        .id();
    let cancelled = store
        .action_enqueue(&fixtures::new_action("s1", 1))
        .await
        .unwrap()
        .id();
    store.action_cancel(cancelled, "setup", None).await.unwrap();
    store
        .action_enqueue(&fixtures::new_action("s1", 2))
        .await
        .unwrap();
    let dispatched = fixtures::settled(store).await;
    store
        .action_enqueue(&fixtures::new_action("s1", 3))
        .await
        .unwrap();
    let delivered = fixtures::settled(store).await;
    fixtures::webhook(store, "evt-1", &delivered.key, Status::Delivered).await;
    let before = db_state(store).await;

    let day = 86_400;
    let item = |extra: Value| {
        let mut v = json!({"store": "s1", "to": "+15551234567", "body": "hi"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let t600 = at(600);
    let enqueues = [
        (
            "expires before not_before",
            json!({"not_before": at(600), "expires_at": at(300)}),
            "expires_before_not_before",
            "expires_at",
        ),
        (
            "expires at not_before",
            json!({"not_before": t600, "expires_at": t600}),
            "expires_before_not_before",
            "expires_at",
        ),
        (
            "not_before two days ago",
            json!({"not_before": at(-2 * day)}),
            "time_too_old",
            "not_before",
        ),
        (
            "not_before in 1970",
            json!({"not_before": "1970-01-01T00:00:00Z"}),
            "time_too_old",
            "not_before",
        ),
        (
            "not_before in a year and a day",
            json!({"not_before": at(366 * day)}),
            "time_too_far",
            "not_before",
        ),
        (
            "expires in the past",
            json!({"expires_at": at(-1)}),
            "already_expired",
            "expires_at",
        ),
        (
            "expires in 9999",
            json!({"expires_at": "9999-12-31T23:59:59Z"}),
            "time_too_far",
            "expires_at",
        ),
    ];
    for (name, extra, code, field) in enqueues {
        let (status, v) = live
            .post("/v1/actions", ADMIN, Some(item(extra.clone())))
            .await;
        assert_eq!(
            (status, v["error"].as_str(), v["field"].as_str()),
            (400, Some(code), Some(field)),
            "{name}: {v}"
        );
        // In a batch, the item is named.
        let batch = json!({"actions": [item(json!({})), item(extra)]});
        let (status, v) = live.post("/v1/actions:batch", ADMIN, Some(batch)).await;
        assert_eq!(
            (status, v["error"].as_str(), v["index"].as_u64()),
            (400, Some(code), Some(1)),
            "{name}, batch: {v}"
        );
    }
    for (name, bad) in [
        ("not a time", json!({"not_before": "tomorrow"})),
        ("a number", json!({"expires_at": 1_700_000_000})),
        ("no zone", json!({"expires_at": "2030-01-01T00:00:00"})),
    ] {
        let (status, v) = live.post("/v1/actions", ADMIN, Some(item(bad))).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("bad_json")),
            "{name}: {v}"
        );
    }

    // Cancels: another store's action is not found; an ended one is 409.
    let (status, v) = live
        .post(&format!("/v1/actions/{pending}/cancel"), &live.other, None)
        .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("not_found")),
        "{v}"
    );
    for (id, code) in [
        (cancelled, "final"),
        (delivered.lease.action_id, "final"),
        (dispatched.lease.action_id, "dispatched"),
    ] {
        let (status, v) = live
            .post(&format!("/v1/actions/{id}/cancel"), ADMIN, None)
            .await;
        assert_eq!(
            (status, v["error"].as_str()),
            (409, Some(code)),
            "{id}: {v}"
        );
    }
    // Re-drives: a store token may not; what may have had an effect, or
    // never left, cannot be.
    let (status, v) = live
        .post(&format!("/v1/actions/{pending}/redrive"), &live.other, None)
        .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (403, Some("admin_only")),
        "{v}"
    );
    for id in [
        pending,
        cancelled,
        dispatched.lease.action_id,
        delivered.lease.action_id,
    ] {
        let (status, v) = live
            .post(&format!("/v1/actions/{id}/redrive"), ADMIN, None)
            .await;
        assert_eq!(
            (status, v["error"].as_str()),
            (409, Some("not_redrivable")),
            "{id}: {v}"
        );
    }
    assert_eq!(db_state(store).await, before);
}

/// Resolutions of actions held unknown: only an admin, only a body of the
/// two outcomes, only an action held unknown; each refusal a clear 4xx with
/// every table as it was. Then one resolution that is allowed.
#[tokio::test]
async fn hostile_resolves_get_a_4xx_and_change_nothing() {
    let live = Live::start().await;
    let store = &live.store;
    let id = store
        .action_enqueue(&fixtures::new_action("s1", 1))
        .await
        .unwrap()
        .id();
    let owner: std::sync::Arc<str> = std::sync::Arc::from("w1");
    let claimed = fixtures::claim_to_send(
        store,
        &owner,
        1,
        60_000,
        1_000,
        courier_store::ClaimMode::Fair,
    )
    .await
    .unwrap();
    store
        .action_hold(&claimed[0].lease, "no_lookup")
        .await
        .unwrap()
        .unwrap();
    let pending = store
        .action_enqueue(&fixtures::new_action("s1", 2))
        .await
        .unwrap()
        .id();
    let before = db_state(store).await;
    let path = format!("/v1/actions/{id}/resolve");
    let sent = Some(json!({"outcome": "sent"}));
    let cases: [(&str, &str, Option<Value>, u16, &str); 8] = [
        (&path, &live.other, sent.clone(), 403, "admin_only"),
        (&path, ADMIN, None, 400, "bad_body"),
        (
            &path,
            ADMIN,
            Some(json!({"outcome": "maybe"})),
            400,
            "bad_body",
        ),
        (
            &path,
            ADMIN,
            Some(json!({"outcome": "sent", "x": 1})),
            400,
            "bad_body",
        ),
        (&path, ADMIN, Some(json!(["sent"])), 400, "bad_body"),
        (
            "/v1/actions/nope/resolve",
            ADMIN,
            sent.clone(),
            400,
            "bad_id",
        ),
        (
            "/v1/actions/999999/resolve",
            ADMIN,
            sent.clone(),
            404,
            "not_found",
        ),
        (
            &format!("/v1/actions/{pending}/resolve"),
            ADMIN,
            sent.clone(),
            409,
            "not_unknown",
        ),
    ];
    for (path, token, body, want, code) in cases {
        let (status, v) = live.post(path, token, body.clone()).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (want, Some(code)),
            "{path} {body:?}: {v}"
        );
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    // serde's derive would take an array of a struct's fields in order: an
    // enqueue, a batch and a webhook must each be a JSON object.
    for (path, body) in [
        ("/v1/actions", json!(["s1", "+15551234567", "hi"])),
        ("/v1/actions:batch", json!([[{"store": "s1"}]])),
    ] {
        let (status, v) = live.post(path, ADMIN, Some(body)).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("bad_json")),
            "{path}: {v}"
        );
    }
    assert_eq!(db_state(store).await, before);
    let (status, v) = live
        .post(&path, ADMIN, Some(json!({"outcome": "not_sent"})))
        .await;
    assert_eq!((status, v["state"].as_str()), (200, Some("failed")), "{v}");
    let (status, v) = live.post(&path, ADMIN, sent).await;
    assert_eq!((status, v["error"].as_str()), (409, Some("not_unknown")));
    // Now a re-drive takes it.
    let (status, v) = live
        .post(&format!("/v1/actions/{id}/redrive"), ADMIN, None)
        .await;
    assert_eq!((status, v["state"].as_str()), (201, Some("pending")), "{v}");
}
