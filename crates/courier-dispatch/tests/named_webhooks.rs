//! Named providers' webhooks on `POST /v1/webhooks/{name}`, against a real
//! PostgreSQL: each is checked with its provider's own scheme; a signed one
//! merges like the contract's, and a forged, stale or unsigned one gets 401
//! and changes nothing.

use courier_core::{action_key, Limits};
use courier_dispatch::server::{router, ServerConfig};
use courier_providers::settings::Settings;
use courier_providers::{infobip, telnyx, twilio, Named, WebhookRegistry};
use courier_store::PgStore;
use courier_testkit::{fixtures, fresh_db};
use serde_json::{json, Value};
use std::time::Duration;

const TWILIO_TOKEN: &str = "twilio-auth-token";
const TELNYX_SECRET: &str = "telnyx-double-secret";
const INFOBIP_SECRET: &str = "infobip-webhook-secret";

fn settings(n: Named) -> Settings {
    let pairs: Vec<(&str, String)> = match n {
        Named::Twilio => n.double_settings(TWILIO_TOKEN, "unused"),
        Named::Telnyx => n.double_settings("api-key", TELNYX_SECRET),
        Named::Infobip => n.double_settings("api-key", INFOBIP_SECRET),
    };
    Settings::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))
}

async fn start(store: PgStore) -> String {
    let mut registry = WebhookRegistry::default();
    for n in Named::ALL {
        registry = registry.with(n.as_str(), n.webhooks(&settings(n)).unwrap());
    }
    let app = router(
        store,
        ServerConfig {
            limits: Limits::default(),
            webhook_secret: b"contract-secret".to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: None,
            request_timeout: Duration::from_secs(10),
            provider_webhooks: registry,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn post(url: &str, headers: &[(&str, String)], ct: &str, body: Vec<u8>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", ct)
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

/// The outbox status of the action with this key.
async fn status_of(store: &PgStore, key: &str) -> String {
    fixtures::column::<String>(
        store,
        &format!("SELECT status FROM outbox WHERE idem_key = '{key}'"),
    )
    .await
    .remove(0)
}

fn twilio_form(sid: &str, status: &str) -> Vec<(&'static str, String)> {
    vec![
        ("MessageSid", sid.to_string()),
        ("MessageStatus", status.to_string()),
        ("ApiVersion", "2010-04-01".to_string()),
    ]
}

fn form_body(params: &[(&str, String)]) -> Vec<u8> {
    twilio::encode_form(params).into_bytes()
}

#[tokio::test]
async fn a_twilio_callback_is_merged_only_with_its_signature() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let c = fixtures::claimed_to_send(&db.store, "s1", 1)
        .await
        .remove(0);
    let key = action_key(&c.uid);
    let url = format!("{api}/v1/webhooks/twilio?key={key}");
    let params = twilio_form("SM0123", "delivered");
    let body = form_body(&params);
    let ct = "application/x-www-form-urlencoded";
    let forged = twilio::sign("another-token", &url, &params);
    let moved = twilio::sign(TWILIO_TOKEN, &format!("{url}x"), &params);
    for headers in [
        vec![],
        vec![("x-twilio-signature", forged)],
        vec![("x-twilio-signature", moved)],
    ] {
        let (code, v) = post(&url, &headers, ct, body.clone()).await;
        assert_eq!(
            (code, v["error"].as_str()),
            (401, Some("bad_signature")),
            "{v}"
        );
        assert_eq!(status_of(&db.store, &key).await, "sending");
    }
    let good = twilio::sign(TWILIO_TOKEN, &url, &params);
    let (code, v) = post(
        &url,
        &[("x-twilio-signature", good.clone())],
        ct,
        body.clone(),
    )
    .await;
    assert_eq!(
        (code, v["outcome"].as_str()),
        (200, Some("advanced")),
        "{v}"
    );
    assert_eq!(status_of(&db.store, &key).await, "delivered");
    // The same event again is absorbed as a duplicate.
    let (code, v) = post(&url, &[("x-twilio-signature", good)], ct, body).await;
    assert_eq!(
        (code, v["outcome"].as_str()),
        (200, Some("duplicate")),
        "{v}"
    );
}

fn telnyx_event(key: &str, api: &str, status: &str) -> Vec<u8> {
    json!({"data": {
        "event_type": "message.finalized",
        "id": format!("evt-{status}"),
        "occurred_at": "2026-12-07T10:00:00Z",
        "record_type": "event",
        "payload": {
            "id": "msg-1",
            "record_type": "message",
            "to": [{"phone_number": "+15551234567", "status": status}],
            "webhook_url": format!("{api}/v1/webhooks/telnyx?key={key}"),
        },
    }})
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn a_telnyx_event_is_merged_only_signed_and_fresh() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let c = fixtures::claimed_to_send(&db.store, "s1", 1)
        .await
        .remove(0);
    let key = action_key(&c.uid);
    let url = format!("{api}/v1/webhooks/telnyx");
    let body = telnyx_event(&key, &api, "delivered");
    let (signing, _public) = telnyx::keypair_from_secret(TELNYX_SECRET);
    let (other, _) = telnyx::keypair_from_secret("someone else");
    let now = chrono::Utc::now().timestamp();
    let signed = |key: &telnyx::SigningKey, at: i64| {
        vec![
            ("telnyx-signature-ed25519", telnyx::sign(key, at, &body)),
            ("telnyx-timestamp", at.to_string()),
        ]
    };
    for headers in [vec![], signed(&other, now), signed(&signing, now - 400)] {
        let (code, v) = post(&url, &headers, "application/json", body.clone()).await;
        assert_eq!(
            (code, v["error"].as_str()),
            (401, Some("bad_signature")),
            "{v}"
        );
        assert_eq!(status_of(&db.store, &key).await, "sending");
    }
    let (code, v) = post(&url, &signed(&signing, now), "application/json", body).await;
    assert_eq!(
        (code, v["outcome"].as_str()),
        (200, Some("advanced")),
        "{v}"
    );
    assert_eq!(status_of(&db.store, &key).await, "delivered");
}

#[tokio::test]
async fn an_infobip_report_is_merged_only_with_courier_s_token() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let c = fixtures::claimed_to_send(&db.store, "s1", 1)
        .await
        .remove(0);
    let key = action_key(&c.uid);
    let base = format!("{api}/v1/webhooks/infobip");
    let report = json!({"results": [{
        "messageId": key,
        "to": "15551234567",
        "status": {"groupId": 3, "groupName": "DELIVERED", "id": 5, "name": "DELIVERED_TO_HANDSET"},
    }]})
    .to_string()
    .into_bytes();
    for url in [
        format!("{base}?key={key}"),
        infobip::notify_url(&base, &key, b"a wrong secret"),
    ] {
        let (code, v) = post(&url, &[], "application/json", report.clone()).await;
        assert_eq!(
            (code, v["error"].as_str()),
            (401, Some("bad_signature")),
            "{v}"
        );
        assert_eq!(status_of(&db.store, &key).await, "sending");
    }
    let url = infobip::notify_url(&base, &key, INFOBIP_SECRET.as_bytes());
    let (code, v) = post(&url, &[], "application/json", report).await;
    assert_eq!(
        (code, v["outcome"].as_str()),
        (200, Some("advanced")),
        "{v}"
    );
    assert_eq!(status_of(&db.store, &key).await, "delivered");
}

#[tokio::test]
async fn a_provider_the_server_does_not_take_is_404_and_a_contract_route_is_unchanged() {
    let db = fresh_db().await;
    let api = start(db.store.clone()).await;
    let (code, v) = post(
        &format!("{api}/v1/webhooks/acme"),
        &[],
        "application/json",
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(
        (code, v["error"].as_str()),
        (404, Some("no_such_provider")),
        "{v}"
    );
    // The contract's route is still the contract's (HMAC over the body).
    let (code, v) = post(
        &format!("{api}/v1/webhooks/provider"),
        &[],
        "application/json",
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(
        (code, v["error"].as_str()),
        (401, Some("bad_signature")),
        "{v}"
    );
}
