//! The client against a live server (the server's router, a real
//! PostgreSQL, real HTTP): every class of answer, provoked, and the
//! database unchanged by every answer that is not a success.

mod live;

use courier_client::{
    Action, Client, ClientError, EnqueueRequest, Enqueued, EnqueuedItem, ProviderFlow,
    ProviderSettings, StoreFlow, StoreSettings,
};
use courier_core::ActionState;
use courier_store::PgStore;
use live::TOKEN;
use serde_json::Value;
use std::time::Duration;

fn order(key: &str) -> EnqueueRequest {
    EnqueueRequest::new("s1", "+15551234567", "Your order has shipped.", key)
}

fn client(url: &str) -> Client {
    Client::new(url, Some(TOKEN.to_string())).unwrap()
}

async fn actions_in(store: &PgStore) -> i64 {
    store.summary(1800).await.unwrap().total()
}

#[tokio::test]
async fn created_then_repeat_then_read_back() {
    let live = live::start().await;
    let c = client(&live.url);
    let Enqueued::Created(a) = c.enqueue(&order("k1")).await.unwrap() else {
        panic!("the first enqueue of k1 did not create it");
    };
    assert_eq!(
        (a.store.as_str(), a.key.as_deref(), a.to.as_str()),
        ("s1", Some("k1"), "+15551234567")
    );
    assert_eq!(a.state, ActionState::Pending);
    assert_eq!(
        c.enqueue(&order("k1")).await.unwrap(),
        Enqueued::Repeat(a.clone())
    );
    assert_eq!(c.get(a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(c.get(a.id + 1_000).await.unwrap(), None);
    assert_eq!(actions_in(&live.store).await, 1);
}

#[tokio::test]
async fn refusals_name_their_reason_and_field() {
    let live = live::start().await;
    let c = client(&live.url);
    let mut bad = order("k1");
    bad.to = "555-1234".into();
    let e = c.enqueue(&bad).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused { status: 400, reason, field: Some(f), index: None, .. }
            if reason == "bad_phone" && f == "to"),
        "{e:?}"
    );

    c.enqueue(&order("k1")).await.unwrap();
    let mut reused = order("k1");
    reused.body = "Another text.".into();
    let e = c.enqueue(&reused).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused { status: 422, reason, field: Some(f), .. }
            if reason == "key_reused" && f == "key"),
        "{e:?}"
    );
    assert_eq!(actions_in(&live.store).await, 1);
}

#[tokio::test]
async fn a_batch_is_answered_in_order_and_refused_at_its_index() {
    let live = live::start().await;
    let c = client(&live.url);
    let items = c
        .enqueue_batch(&[order("k1"), order("k2"), order("k1")])
        .await
        .unwrap();
    assert_eq!(items.len(), 3);
    assert!(items[0].created && items[1].created);
    assert_ne!(items[0].id, items[1].id);
    assert_eq!(
        items[2],
        EnqueuedItem {
            id: items[0].id,
            created: false
        },
        "a repeat of an earlier item of the same batch"
    );

    let mut bad = order("k4");
    bad.store = "a b".into();
    let e = c.enqueue_batch(&[order("k3"), bad]).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused { status: 400, reason, field: Some(f), index: Some(1), .. }
            if reason == "bad_store" && f == "store"),
        "{e:?}"
    );
    assert_eq!(
        actions_in(&live.store).await,
        2,
        "all or nothing: k3 was not enqueued"
    );
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_unauthorized() {
    let live = live::start().await;
    let id = client(&live.url)
        .enqueue(&order("k1"))
        .await
        .unwrap()
        .action()
        .id;
    for c in [
        Client::new(&live.url, None).unwrap(),
        Client::new(&live.url, Some(format!("{TOKEN}x"))).unwrap(),
    ] {
        let answers = [
            c.enqueue(&order("k2")).await.unwrap_err(),
            c.enqueue_batch(&[order("k3")]).await.unwrap_err(),
            c.get(id).await.unwrap_err(),
        ];
        for e in answers {
            assert!(
                matches!(e, ClientError::Unauthorized { .. }),
                "{c:?}: {e:?}"
            );
        }
    }
    assert_eq!(actions_in(&live.store).await, 1);
}

#[tokio::test]
async fn a_port_that_refuses_is_an_unknown_outcome() {
    let (_socket, url) = live::closed_port();
    let c = client(&url);
    let answers = [
        c.enqueue(&order("k1")).await.unwrap_err(),
        c.enqueue_batch(&[order("k1")]).await.unwrap_err(),
        c.get(1).await.unwrap_err(),
    ];
    for e in answers {
        assert!(e.is_unknown(), "{e:?}");
        assert!(e.to_string().contains("connection failed"), "{e}");
    }
}

#[tokio::test]
async fn a_server_that_never_answers_is_an_unknown_outcome() {
    // Accepts connections and holds them without a byte of answer.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let _ = held_tx.send(conn);
        }
    });
    let c = Client::with_timeout(&url, None, Duration::from_millis(300)).unwrap();
    let e = c.enqueue(&order("k1")).await.unwrap_err();
    assert!(e.is_unknown() && e.to_string().contains("time-out"), "{e}");
    assert!(
        held_rx.recv().await.is_some(),
        "the request reached the server"
    );
}

#[test]
fn a_client_needs_an_http_url_and_a_printable_token_and_hides_it() {
    assert!(Client::new("https://courier.example", None).is_err());
    assert!(Client::new("not a url", None).is_err());
    assert!(Client::new("http://127.0.0.1:1", Some(String::new())).is_err());
    assert!(Client::new("http://127.0.0.1:1", Some("a\nb".into())).is_err());
    let c = Client::new("http://127.0.0.1:1/", Some("secret-token".into())).unwrap();
    assert_eq!(c.base_url(), "http://127.0.0.1:1");
    let shown = format!("{c:?}");
    assert!(!shown.contains("secret-token"), "{shown}");
}

/// The names of an object's fields.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// The client's types have exactly the fields of the document's schemas
/// of the same name: a field added to the API is added here too.
#[test]
fn the_types_have_the_fields_of_the_documents_schemas() {
    let doc: Value = serde_json::from_str(&courier_dispatch::openapi::document_json()).unwrap();
    let schema = |name: &str| keys(&doc["components"]["schemas"][name]["properties"]);
    let action = Action {
        id: 1,
        store: "s1".into(),
        key: None,
        to: "+15551234567".into(),
        state: ActionState::Pending,
        epoch: 0,
        status: None,
        idempotency_key: None,
        attempts: 0,
        message_id: None,
        fail_reason: None,
        enqueued_at: "2026-01-01T00:00:00.000Z".into(),
        not_before: None,
        expires_at: None,
        redrive_of: None,
        redriven_as: None,
    };
    let timed = order("k")
        .with_not_before("2026-12-24T09:00:00Z".parse().unwrap())
        .with_expires_at("2026-12-24T09:10:00Z".parse().unwrap());
    let item = EnqueuedItem {
        id: 1,
        created: true,
    };
    let store = StoreFlow {
        store: "s1".into(),
        settings: StoreSettings::default(),
        in_flight: 0,
        tokens: None,
        configured_at: None,
    };
    let gate = ProviderFlow {
        provider: "contract".into(),
        settings: ProviderSettings::default(),
        tokens: None,
        paused_ms: None,
        pauses: 0,
        configured_at: None,
    };
    for (name, ours) in [
        ("Action", serde_json::to_value(&action).unwrap()),
        ("EnqueueRequest", serde_json::to_value(timed).unwrap()),
        ("EnqueuedItem", serde_json::to_value(item).unwrap()),
        ("StoreFlow", serde_json::to_value(&store).unwrap()),
        ("ProviderFlow", serde_json::to_value(&gate).unwrap()),
        (
            "StoreSettings",
            serde_json::to_value(StoreSettings::default()).unwrap(),
        ),
        (
            "ProviderSettings",
            serde_json::to_value(ProviderSettings::default()).unwrap(),
        ),
    ] {
        assert_eq!(keys(&ours), schema(name), "{name}");
    }
}

#[tokio::test]
async fn a_store_token_is_forbidden_other_stores_and_does_not_see_their_actions() {
    let live = live::start().await;
    let token = live.store_token(&["s1"]).await;
    let tenant = Client::new(&live.url, Some(token)).unwrap();
    let mine = tenant.enqueue(&order("k1")).await.unwrap();
    assert!(matches!(mine, Enqueued::Created(_)));
    let other = EnqueueRequest::new("s2", "+15551234567", "not mine", "k2");
    match tenant.enqueue(&other).await {
        Err(ClientError::Forbidden { reason, .. }) => assert_eq!(reason, "forbidden_store"),
        e => panic!("{e:?}"),
    }
    // Another store's action, read with the tenant's token: not there.
    let Enqueued::Created(theirs) = client(&live.url).enqueue(&other).await.unwrap() else {
        panic!("the admin could not enqueue for s2");
    };
    assert_eq!(tenant.get(theirs.id).await.unwrap(), None);
    assert_eq!(actions_in(&live.store).await, 2);
}

#[tokio::test]
async fn a_scheduled_action_shows_its_times_and_is_cancelled_once() {
    let live = live::start().await;
    let c = client(&live.url);
    let now = chrono::Utc::now();
    let not_before = now + chrono::TimeDelta::hours(1);
    let expires_at = now + chrono::TimeDelta::hours(2);
    let req = order("k1")
        .with_not_before(not_before)
        .with_expires_at(expires_at);
    let a = c.enqueue(&req).await.unwrap().into_action();
    assert_eq!(a.state, ActionState::Scheduled);
    let ms =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert_eq!(a.not_before, Some(ms(not_before)));
    assert_eq!(a.expires_at, Some(ms(expires_at)));

    let cancelled = c.cancel(a.id).await.unwrap().expect("the action exists");
    assert_eq!(
        (cancelled.id, cancelled.state),
        (a.id, ActionState::Cancelled)
    );
    // A second cancel finds it ended: a definite refusal, nothing changed.
    let e = c.cancel(a.id).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused { status: 409, reason, .. } if reason == "final"),
        "{e:?}"
    );
    assert_eq!(
        c.get(a.id).await.unwrap().unwrap().state,
        ActionState::Cancelled
    );
    assert_eq!(c.cancel(a.id + 1_000).await.unwrap(), None);
    assert_eq!(actions_in(&live.store).await, 1);
}

#[tokio::test]
async fn store_settings_are_set_read_back_and_refused_with_their_field() {
    let live = live::start().await;
    let c = client(&live.url);
    assert_eq!(c.store_settings_get("shop-1").await.unwrap(), None);
    let set = StoreSettings {
        rate_per_s: Some(5.0),
        burst: Some(10),
        in_flight_max: Some(2),
    };
    let flow = c.store_settings_put("shop-1", &set).await.unwrap();
    assert_eq!((flow.store.as_str(), flow.settings), ("shop-1", set));
    assert!(flow.configured_at.is_some());
    let got = c.store_settings_get("shop-1").await.unwrap().unwrap();
    assert_eq!(got.settings, set);
    let list = c.stores_configured().await.unwrap();
    assert_eq!(list.stores.len(), 1);
    assert!(!list.truncated);
    // Refused by the client (the same check as the server's), and by the
    // server (a name the client sends as it is): nothing changed.
    for (store, settings, reason, field) in [
        (
            "shop-1",
            StoreSettings {
                burst: Some(0),
                ..set
            },
            "bad_settings",
            "burst",
        ),
        (
            "shop-1",
            StoreSettings {
                rate_per_s: Some(-1.0),
                ..set
            },
            "bad_settings",
            "rate_per_s",
        ),
        (
            "shop-1",
            StoreSettings {
                rate_per_s: None,
                ..set
            },
            "bad_settings",
            "burst",
        ),
        ("a b", set, "bad_store", "store"),
        (".", set, "bad_store", "store"),
    ] {
        let e = c.store_settings_put(store, &settings).await.unwrap_err();
        assert!(
            matches!(&e, ClientError::Refused { status: 400, reason: r, field: Some(f), .. }
                if r == reason && f == field),
            "{store} {settings:?}: {e:?}"
        );
    }
    let e = c.store_settings_get("a/b").await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused { status: 400, reason, .. } if reason == "bad_store"),
        "{e:?}"
    );
    assert_eq!(
        c.store_settings_get("shop-1")
            .await
            .unwrap()
            .unwrap()
            .settings,
        set
    );
}

#[tokio::test]
async fn a_providers_ceiling_is_set_and_read_and_a_store_token_is_forbidden() {
    let live = live::start().await;
    let c = client(&live.url);
    assert_eq!(c.provider_settings_get("contract").await.unwrap(), None);
    let ceiling = ProviderSettings {
        rate_per_s: Some(50.0),
        burst: None,
    };
    let gate = c.provider_settings_put("contract", &ceiling).await.unwrap();
    assert_eq!(gate.settings.burst, Some(50), "one second's worth");
    assert_eq!((gate.paused_ms, gate.pauses), (None, 0));
    let read = c.provider_settings_get("contract").await.unwrap().unwrap();
    assert_eq!((read.settings, read.pauses), (gate.settings, 0));
    let token = live.store_token(&["s1"]).await;
    let tenant = Client::new(&live.url, Some(token)).unwrap();
    let answers = [
        tenant
            .store_settings_put("s1", &StoreSettings::default())
            .await
            .unwrap_err(),
        tenant.store_settings_get("s1").await.unwrap_err(),
        tenant.stores_configured().await.unwrap_err(),
        tenant
            .provider_settings_put("contract", &ProviderSettings::default())
            .await
            .unwrap_err(),
        tenant.provider_settings_get("contract").await.unwrap_err(),
    ];
    for e in answers {
        assert!(
            matches!(&e, ClientError::Forbidden { reason, .. } if reason == "admin_only"),
            "{e:?}"
        );
    }
    assert_eq!(
        c.provider_settings_get("contract")
            .await
            .unwrap()
            .unwrap()
            .settings,
        gate.settings
    );
}
