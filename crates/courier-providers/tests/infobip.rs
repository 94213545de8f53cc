//! Infobip's adapter against Infobip's documented examples
//! (`tests/fixtures/infobip/`, provenance in its README): the send body,
//! every row of the answer tables, the statuses, the delivery reports and
//! their token, the tier, and the client on the wire.

use courier_core::step::SendAnswer;
use courier_core::{Status, Tier, UnknownPolicy};
use courier_provider::wire::MessageView;
use courier_provider::{LookupOutcome, Provider, SendOutcome};
use courier_providers::infobip::{self, classify_lookup, classify_send, map_status, Client, Hooks};
use courier_providers::settings::{Settings, SettingsError};
use courier_providers::{Inbound, Parsed, Refusal, Report, Webhooks};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const SECRET: &str = "courier-infobip-secret";
const KEY: &str = "courier-0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
const CALLBACK: &str = "https://courier.example/v1/webhooks/infobip";

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/infobip/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

/// The token, computed here independently of the adapter.
fn hmac_hex(secret: &str, key: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(key.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn settings(idempotent: Option<&str>) -> Settings {
    let mut pairs = vec![
        ("INFOBIP_API_KEY", "api-key-123"),
        ("INFOBIP_FROM", "InfoSMS"),
        ("INFOBIP_WEBHOOK_SECRET", SECRET),
        ("INFOBIP_IDEMPOTENCY_WINDOW_S", "86400"),
    ];
    if let Some(v) = idempotent {
        pairs.push(("INFOBIP_IDEMPOTENT", v));
    }
    Settings::from_pairs(pairs)
}

/// Every JSON path of a value, array indices collapsed to `[]`.
fn paths(v: &Value, at: String, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                paths(v, format!("{at}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for v in a {
                paths(v, format!("{at}[]"), out);
            }
        }
        _ => {
            out.insert(at);
        }
    }
}

fn status_json(group_id: u32, group: &str, id: u32, name: &str) -> Value {
    json!({"groupId": group_id, "groupName": group, "id": id, "name": name, "description": "d"})
}

fn send_answer(message_id: &str, status: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "bulkId": "2034072219640523072",
        "messages": [{"messageId": message_id, "status": status, "destination": "41793026727"}]
    }))
    .unwrap()
}

fn logs(entries: &[(&str, Value)]) -> Vec<u8> {
    let results: Vec<Value> = entries
        .iter()
        .map(|(id, st)| json!({"messageId": id, "status": st, "doneAt": "2023-08-01T16:10:00+05:30"}))
        .collect();
    serde_json::to_vec(&json!({ "results": results })).unwrap()
}

// ---- the send body ----

#[test]
fn the_send_body_carries_the_key_as_message_id_and_a_delivery_url_with_key_and_token() {
    let url = infobip::notify_url(CALLBACK, KEY, SECRET.as_bytes());
    let body = infobip::send_body("InfoSMS", KEY, "+41793026727", "Hello", Some(&url));
    let v = serde_json::to_value(&body).unwrap();
    let m = &v["messages"][0];
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    assert_eq!(m["sender"], "InfoSMS");
    assert_eq!(m["destinations"].as_array().unwrap().len(), 1);
    assert_eq!(m["destinations"][0]["messageId"], KEY);
    // Infobip takes international numbers without the '+'.
    assert_eq!(m["destinations"][0]["to"], "41793026727");
    assert_eq!(m["content"]["text"], "Hello");
    assert_eq!(m["webhooks"]["contentType"], "application/json");
    assert_eq!(m["webhooks"]["callbackData"], KEY);
    let expected = format!("{CALLBACK}?key={KEY}&token={}", hmac_hex(SECRET, KEY));
    assert_eq!(m["webhooks"]["delivery"]["url"], expected.as_str());
    // The token is the key's under this secret, no other's.
    assert_ne!(
        infobip::token(SECRET.as_bytes(), "courier-other"),
        hmac_hex(SECRET, KEY)
    );
    // Without a callback, no delivery reports are asked for.
    let v = serde_json::to_value(infobip::send_body("S", KEY, "+41793026727", "x", None)).unwrap();
    assert!(v["messages"][0].get("webhooks").is_none(), "{v}");
}

#[test]
fn the_delivery_url_keeps_a_query_the_callback_already_has() {
    let url = infobip::notify_url("https://c.example/hook?tenant=a", "k 1", b"s");
    assert_eq!(
        url,
        format!(
            "https://c.example/hook?tenant=a&key=k%201&token={}",
            hmac_hex("s", "k 1")
        )
    );
}

#[test]
fn the_send_body_uses_only_the_documented_v3_shape() {
    let url = infobip::notify_url(CALLBACK, KEY, SECRET.as_bytes());
    let ours = serde_json::to_value(infobip::send_body(
        "S",
        KEY,
        "+41793026727",
        "x",
        Some(&url),
    ))
    .unwrap();
    let (mut ours_paths, mut documented) = (BTreeSet::new(), BTreeSet::new());
    paths(&ours, String::new(), &mut ours_paths);
    paths(
        &fixture_json("send_request.json"),
        String::new(),
        &mut documented,
    );
    let undocumented: Vec<&String> = ours_paths.difference(&documented).collect();
    assert!(undocumented.is_empty(), "{undocumented:?}");
    // And the adapter's types read the documented request back.
    let doc: infobip::wire::SendBody =
        serde_json::from_slice(&fixture("send_request.json")).unwrap();
    assert_eq!(
        doc.messages[0].destinations[0].message_id.as_deref(),
        Some("MESSAGE-ID-123-xyz")
    );
    let quick: infobip::wire::SendBody =
        serde_json::from_slice(&fixture("send_request.quickstart.json")).unwrap();
    assert_eq!(quick.messages[0].content.text, "This is a sample message");
}

// ---- the send answer ----

#[test]
fn the_documented_200_is_accepted_with_its_status_mapped() {
    let body = fixture("send_response_200.json");
    let key = "2250be2d4219-3af1-78856-aabe-1362af1edfd2";
    assert_eq!(
        classify_send(200, &body, key),
        SendOutcome::Accepted(MessageView {
            id: key.into(),
            key: key.into(),
            status: Status::Accepted,
            updated_at: None,
        })
    );
    // Two messages, neither ours: nothing can be said of ours.
    assert!(matches!(
        classify_send(200, &body, KEY),
        SendOutcome::Unknown(_)
    ));
    // The only message, with an id Infobip assigned: it exists, accepted.
    let own_id = send_answer(
        "infobip-own-id",
        status_json(1, "PENDING", 26, "PENDING_ACCEPTED"),
    );
    assert!(matches!(
        classify_send(200, &own_id, KEY),
        SendOutcome::Accepted(m) if m.id == "infobip-own-id" && m.key == KEY
    ));
    let to_operator = send_answer(KEY, status_json(3, "DELIVERED", 2, "DELIVERED_TO_OPERATOR"));
    assert!(matches!(
        classify_send(200, &to_operator, KEY),
        SendOutcome::Accepted(m) if m.status == Status::Sent
    ));
}

#[test]
fn a_rejected_message_in_a_200_is_unknown_so_courier_looks_it_up() {
    for (id, name) in [
        (23, "REJECTED_DUPLICATE_MESSAGE_ID"),
        (12, "REJECTED_NOT_ENOUGH_CREDITS"),
        (20, "REJECTED_FLOODING_FILTER"),
    ] {
        let body = send_answer(KEY, status_json(5, "REJECTED", id, name));
        let out = classify_send(200, &body, KEY);
        assert!(matches!(out, SendOutcome::Unknown(_)), "{name}: {out:?}");
    }
    // The duplicate's id alone is enough to recognise it.
    let body = send_answer(
        KEY,
        json!({"groupId": 5, "groupName": "REJECTED", "id": 23, "name": "X"}),
    );
    assert!(matches!(
        classify_send(200, &body, KEY),
        SendOutcome::Unknown(_)
    ));
}

#[test]
fn the_documented_400_is_a_definite_refusal_unless_it_names_a_duplicate() {
    let out = classify_send(400, &fixture("error_400.json"), KEY);
    let SendOutcome::Rejected { status: 400, error } = &out else {
        panic!("{out:?}")
    };
    assert!(error.contains("BAD_REQUEST"), "{error}");
    assert!(
        error.contains("messages[0].destinations: must not be empty"),
        "{error}"
    );
    // The v3 ApiError shape is read too.
    let api_error = br#"{"errorCode":"E400","description":"Invalid request.","action":"Check the syntax","violations":[{"property":"messages[0].content.text","violation":"must not be blank"}]}"#;
    let out = classify_send(400, api_error, KEY);
    assert!(
        matches!(&out, SendOutcome::Rejected { status: 400, error } if error.contains("E400") && error.contains("must not be blank")),
        "{out:?}"
    );
    let dup = br#"{"requestError":{"serviceException":{"messageId":"BAD_REQUEST","text":"Duplicate messageId"}}}"#;
    assert!(matches!(
        classify_send(400, dup, KEY),
        SendOutcome::Unknown(_)
    ));
}

#[test]
fn refused_credentials_are_not_the_actions_fault() {
    let out = classify_send(401, &fixture("error_401.json"), KEY);
    assert!(
        matches!(&out, SendOutcome::Rejected { status: 401, error } if error.contains("UNAUTHORIZED")),
        "{out:?}"
    );
    assert!(matches!(out.answer(), SendAnswer::CredentialsRefused(_)));
    let out = classify_send(
        403,
        br#"{"requestError":{"serviceException":{"messageId":"FORBIDDEN","text":"x"}}}"#,
        KEY,
    );
    assert!(matches!(out.answer(), SendAnswer::CredentialsRefused(_)));
}

#[test]
fn rate_limits_server_faults_and_garbage_are_unknown() {
    let err = br#"{"requestError":{"serviceException":{"messageId":"GENERAL_ERROR","text":"Something went wrong"}}}"#;
    for status in [429, 500, 502, 503, 504, 404, 409, 422, 302, 201] {
        let out = classify_send(status, err, KEY);
        assert_eq!(out.answer(), SendAnswer::Unknown, "{status}: {out:?}");
        // Only the 429 pauses the workers.
        assert_eq!(out.throttle().is_some(), status == 429, "{status}: {out:?}");
    }
    for garbage in [
        &b"not json"[..],
        b"",
        br#"{"messages":"x"}"#,
        br#"{"messages":[{"messageId":"k"}]}"#,
    ] {
        let out = classify_send(200, garbage, KEY);
        assert!(matches!(out, SendOutcome::Unknown(_)), "{out:?}");
    }
    let unknown_group = send_answer(KEY, status_json(9, "SOMETHING_NEW", 99, "SOMETHING_NEW"));
    assert!(matches!(
        classify_send(200, &unknown_group, KEY),
        SendOutcome::Unknown(_)
    ));
}

#[test]
fn outcome_texts_never_carry_the_key() {
    let body = format!(
        r#"{{"requestError":{{"serviceException":{{"messageId":"BAD_REQUEST","text":"bad messageId {KEY}"}}}}}}"#
    );
    for status in [400, 500] {
        let text = match classify_send(status, body.as_bytes(), KEY) {
            SendOutcome::Rejected { error, .. } => error,
            SendOutcome::Unknown(why) => why,
            other => panic!("{other:?}"),
        };
        assert!(!text.contains(KEY), "{text}");
        assert!(text.contains("<key>"), "{text}");
    }
    let LookupOutcome::Unknown(why) = classify_lookup(500, body.as_bytes(), KEY) else {
        panic!()
    };
    assert!(!why.contains(KEY), "{why}");
}

// ---- the lookup ----

#[test]
fn the_documented_logs_answer_finds_the_message_by_its_message_id() {
    let body = fixture("logs_response.json");
    assert_eq!(
        classify_lookup(200, &body, "MESSAGE-ID-123-xyz"),
        LookupOutcome::Found(MessageView {
            id: "MESSAGE-ID-123-xyz".into(),
            key: "MESSAGE-ID-123-xyz".into(),
            status: Status::Delivered,
            updated_at: Some("2023-08-01T16:10:00+05:30".into()),
        })
    );
    // Entries of other messages only: the filter was not applied, no answer.
    assert!(matches!(
        classify_lookup(200, &body, KEY),
        LookupOutcome::Unknown(_)
    ));
}

#[test]
fn only_an_empty_results_list_is_not_found() {
    assert_eq!(
        classify_lookup(200, br#"{"results": []}"#, KEY),
        LookupOutcome::NotFound
    );
    for (status, body) in [
        (401, &fixture("error_401.json")[..]),
        (403, b"{}"),
        (404, br#"{"results": []}"#),
        (429, b""),
        (500, br#"{"results": []}"#),
        (503, b"<html>"),
        (200, b"not json"),
        (200, b"{}"),
    ] {
        let out = classify_lookup(status, body, KEY);
        assert!(
            matches!(out, LookupOutcome::Unknown(_)),
            "{status}: {out:?}"
        );
    }
}

#[test]
fn a_rejected_repeat_in_the_logs_never_hides_or_fails_the_original() {
    let dup = status_json(5, "REJECTED", 23, "REJECTED_DUPLICATE_MESSAGE_ID");
    let pending = status_json(1, "PENDING", 26, "PENDING_ACCEPTED");
    let flood = status_json(5, "REJECTED", 20, "REJECTED_FLOODING_FILTER");
    let found = |body: Vec<u8>| match classify_lookup(200, &body, KEY) {
        LookupOutcome::Found(m) => Some(m.status),
        _ => None,
    };
    assert_eq!(
        found(logs(&[(KEY, dup.clone()), (KEY, pending.clone())])),
        Some(Status::Accepted)
    );
    assert_eq!(
        found(logs(&[(KEY, flood.clone()), (KEY, pending)])),
        Some(Status::Accepted)
    );
    // Every submission rejected: nothing was sent.
    assert_eq!(found(logs(&[(KEY, flood)])), Some(Status::Failed));
    // Only the repeat's rejection is visible: the original is not, yet.
    assert!(matches!(
        classify_lookup(200, &logs(&[(KEY, dup)]), KEY),
        LookupOutcome::Unknown(_)
    ));
}

// ---- statuses ----

#[test]
fn statuses_map_onto_courier_order() {
    let table = [
        ("PENDING", "PENDING_ACCEPTED", Some(Status::Accepted)),
        ("PENDING", "PENDING_ENROUTE", Some(Status::Accepted)),
        (
            "PENDING",
            "PENDING_WAITING_DELIVERY",
            Some(Status::Accepted),
        ),
        ("ACCEPTED", "ACCEPTED", Some(Status::Accepted)),
        ("DELIVERED", "DELIVERED_TO_OPERATOR", Some(Status::Sent)),
        ("DELIVERED", "DELIVERED_TO_HANDSET", Some(Status::Delivered)),
        (
            "UNDELIVERABLE",
            "UNDELIVERABLE_NOT_DELIVERED",
            Some(Status::Failed),
        ),
        (
            "UNDELIVERABLE",
            "UNDELIVERABLE_REJECTED_OPERATOR",
            Some(Status::Failed),
        ),
        ("EXPIRED", "EXPIRED_EXPIRED", Some(Status::Failed)),
        ("EXPIRED", "EXPIRED_DLR_UNKNOWN", Some(Status::Failed)),
        ("REJECTED", "REJECTED_NETWORK", Some(Status::Failed)),
        ("REJECTED", "REJECTED_DUPLICATE_MESSAGE_ID", None),
        ("OK", "NO_ERROR", None),
        ("pending", "PENDING_ACCEPTED", None),
        ("", "", None),
    ];
    for (group, name, expected) in table {
        assert_eq!(map_status(group, name), expected, "{group}/{name}");
    }
}

// ---- delivery reports ----

fn report_url(key: &str, token: Option<&str>) -> String {
    match token {
        Some(t) => format!("{CALLBACK}?key={key}&token={t}"),
        None => format!("{CALLBACK}?key={key}"),
    }
}

fn receive(url: &str, body: &[u8]) -> Result<Parsed, Refusal> {
    let hooks = Hooks::new(&settings(None)).unwrap();
    hooks.receive(&Inbound {
        url,
        headers: &[],
        body,
        now_s: 0,
    })
}

#[test]
fn a_report_with_the_keys_token_is_read() {
    let key = "MESSAGE-ID-123-xyz";
    let url = infobip::notify_url(CALLBACK, key, SECRET.as_bytes());
    assert_eq!(
        receive(&url, &fixture("delivery_report.json")),
        Ok(Parsed::Report(Report {
            key: key.into(),
            status: Status::Delivered,
            event_id: "MESSAGE-ID-123-xyz:DELIVERED_TO_HANDSET".into(),
            message_id: key.into(),
        }))
    );
    // Upper-case hex is the same token.
    let upper = report_url(key, Some(&hmac_hex(SECRET, key).to_uppercase()));
    assert!(matches!(
        receive(&upper, &fixture("delivery_report.json")),
        Ok(Parsed::Report(_))
    ));
}

#[test]
fn a_report_without_a_token_is_unsigned_and_a_wrong_one_forged() {
    let key = "MESSAGE-ID-123-xyz";
    let body = fixture("delivery_report.json");
    assert_eq!(
        receive(&report_url(key, None), &body),
        Err(Refusal::Unsigned)
    );
    for token in [
        hmac_hex(SECRET, "courier-other"),
        hmac_hex("another-secret", key),
        "zz".to_string(),
        String::new(),
        hmac_hex(SECRET, key)[..62].to_string(),
    ] {
        assert_eq!(
            receive(&report_url(key, Some(&token)), &body),
            Err(Refusal::Forged),
            "{token}"
        );
    }
    // A token with no key to check it against.
    let url = format!("{CALLBACK}?token={}", hmac_hex(SECRET, key));
    assert_eq!(receive(&url, &body), Err(Refusal::Forged));
    // The token is checked before the body is read.
    assert_eq!(
        receive(&report_url(key, Some("00")), b"not json"),
        Err(Refusal::Forged)
    );
}

#[test]
fn a_report_for_another_message_than_the_urls_key_is_malformed() {
    // A valid token, for a key the report does not name.
    let url = infobip::notify_url(CALLBACK, KEY, SECRET.as_bytes());
    let out = receive(&url, &fixture("delivery_report.json"));
    assert!(matches!(out, Err(Refusal::Malformed(_))), "{out:?}");
    assert!(matches!(
        receive(&url, b"not json"),
        Err(Refusal::Malformed(_))
    ));
    assert!(matches!(
        receive(&url, br#"{"results": []}"#),
        Err(Refusal::Malformed(_))
    ));
}

fn report(entries: &[(&str, Value)]) -> Vec<u8> {
    let results: Vec<Value> = entries
        .iter()
        .map(|(id, st)| json!({"messageId": id, "status": st, "to": "41793026727"}))
        .collect();
    serde_json::to_vec(&json!({ "results": results })).unwrap()
}

#[test]
fn of_several_results_only_the_urls_message_counts() {
    let url = infobip::notify_url(CALLBACK, KEY, SECRET.as_bytes());
    let body = report(&[
        (
            "someone-else",
            status_json(2, "UNDELIVERABLE", 9, "UNDELIVERABLE_NOT_DELIVERED"),
        ),
        (KEY, status_json(3, "DELIVERED", 2, "DELIVERED_TO_OPERATOR")),
    ]);
    let Ok(Parsed::Report(r)) = receive(&url, &body) else {
        panic!()
    };
    assert_eq!((r.key.as_str(), r.status), (KEY, Status::Sent));
    assert_eq!(r.event_id, format!("{KEY}:DELIVERED_TO_OPERATOR"));
}

#[test]
fn a_rejected_repeat_or_an_unknown_status_is_ignored() {
    let url = infobip::notify_url(CALLBACK, KEY, SECRET.as_bytes());
    for st in [
        status_json(5, "REJECTED", 23, "REJECTED_DUPLICATE_MESSAGE_ID"),
        status_json(9, "SOMETHING_NEW", 99, "SOMETHING_NEW"),
    ] {
        let out = receive(&url, &report(&[(KEY, st)]));
        assert!(matches!(out, Ok(Parsed::Ignored(_))), "{out:?}");
    }
    // Beside the original's status, the repeat's rejection changes nothing.
    let body = report(&[
        (
            KEY,
            status_json(5, "REJECTED", 23, "REJECTED_DUPLICATE_MESSAGE_ID"),
        ),
        (KEY, status_json(3, "DELIVERED", 5, "DELIVERED_TO_HANDSET")),
    ]);
    assert!(matches!(receive(&url, &body), Ok(Parsed::Report(r)) if r.status == Status::Delivered));
    // Nor does another rejection (a repeat's, perhaps) beside a submission
    // that was not rejected.
    let body = report(&[
        (
            KEY,
            status_json(5, "REJECTED", 20, "REJECTED_FLOODING_FILTER"),
        ),
        (KEY, status_json(3, "DELIVERED", 2, "DELIVERED_TO_OPERATOR")),
    ]);
    assert!(matches!(receive(&url, &body), Ok(Parsed::Report(r)) if r.status == Status::Sent));
    let body = report(&[(
        KEY,
        status_json(5, "REJECTED", 20, "REJECTED_FLOODING_FILTER"),
    )]);
    assert!(matches!(receive(&url, &body), Ok(Parsed::Report(r)) if r.status == Status::Failed));
}

#[test]
fn hooks_need_the_webhook_secret() {
    let err = Hooks::new(&Settings::from_pairs([("INFOBIP_API_KEY", "k")])).unwrap_err();
    assert!(matches!(err, SettingsError::Missing { name, .. } if name == "INFOBIP_WEBHOOK_SECRET"));
}

// ---- the tier ----

#[test]
fn the_tier_is_a_only_with_idempotency_declared_on() {
    assert_eq!(infobip::tier(&settings(Some("on"))), Tier::A);
    for v in [None, Some("off"), Some("true"), Some("ON"), Some("")] {
        assert_eq!(
            infobip::tier(&settings(v)),
            Tier::C(UnknownPolicy::Hold),
            "{v:?}"
        );
    }
    assert_eq!(infobip::NAME, "infobip");
    assert_eq!(
        infobip::SETTINGS,
        [
            "INFOBIP_API_KEY",
            "INFOBIP_FROM",
            "INFOBIP_WEBHOOK_SECRET",
            "INFOBIP_IDEMPOTENT",
            "INFOBIP_IDEMPOTENCY_WINDOW_S"
        ]
    );
}

#[test]
fn idempotency_settings_are_checked_and_bound_the_key_retention() {
    let t = Duration::from_secs(1);
    // A typo is refused, not read as off.
    let err = Client::new(&settings(Some("true")), "http://x", None, t).unwrap_err();
    assert!(
        matches!(err, SettingsError::Invalid { ref name, .. } if name == "INFOBIP_IDEMPOTENT"),
        "{err}"
    );
    // On needs the grace period.
    let no_window = Settings::from_pairs([
        ("INFOBIP_API_KEY", "k"),
        ("INFOBIP_FROM", "f"),
        ("INFOBIP_IDEMPOTENT", "on"),
    ]);
    let err = Client::new(&no_window, "http://x", None, t).unwrap_err();
    assert!(
        matches!(err, SettingsError::Missing { ref name, .. } if name == "INFOBIP_IDEMPOTENCY_WINDOW_S"),
        "{err}"
    );
    assert_eq!(
        infobip::idempotency_window_s(&settings(Some("on"))),
        Ok(Some(86_400))
    );
    assert_eq!(infobip::idempotency_window_s(&settings(None)), Ok(None));
    // courier must forget a key no later than Infobip does.
    assert_eq!(
        infobip::check_key_retention(&settings(Some("on")), 86_400),
        Ok(())
    );
    assert!(matches!(
        infobip::check_key_retention(&settings(Some("on")), 86_401),
        Err(SettingsError::Invalid { .. })
    ));
    assert_eq!(
        infobip::check_key_retention(&settings(None), 1_000_000),
        Ok(())
    );
    // Past the 48 h its logs reach back, a lookup cannot find a message.
    let long = Settings::from_pairs([
        ("INFOBIP_IDEMPOTENT", "on"),
        ("INFOBIP_IDEMPOTENCY_WINDOW_S", "604800"),
    ]);
    assert_eq!(infobip::check_key_retention(&long, 172_800), Ok(()));
    assert!(matches!(
        infobip::check_key_retention(&long, 172_801),
        Err(SettingsError::Invalid { ref name, .. }) if name == "--key-retention-s"
    ));
}

#[test]
fn the_client_needs_its_settings_and_never_prints_the_api_key() {
    let t = Duration::from_secs(1);
    let err = Client::new(&Settings::default(), "http://x", None, t).unwrap_err();
    assert!(matches!(err, SettingsError::Missing { ref name, .. } if name == "INFOBIP_API_KEY"));
    let no_secret = Settings::from_pairs([("INFOBIP_API_KEY", "k"), ("INFOBIP_FROM", "f")]);
    assert!(Client::new(&no_secret, "http://x", None, t).is_ok());
    let err = Client::new(&no_secret, "http://x", Some(CALLBACK), t).unwrap_err();
    assert!(
        matches!(err, SettingsError::Missing { ref name, .. } if name == "INFOBIP_WEBHOOK_SECRET")
    );
    let c = Client::new(&settings(Some("on")), "http://x/", Some(CALLBACK), t).unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("api-key-123") && !shown.contains(SECRET),
        "{shown}"
    );
    assert_eq!(c.tier(), Tier::A);
}

// ---- the client on the wire ----

/// One request as a loopback server received it.
struct Seen {
    head: String,
    body: Vec<u8>,
}

/// Answers one request with `status` and `body`, and hands it back.
async fn serve_once(status: u16, body: &'static str) -> (String, tokio::task::JoinHandle<Seen>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let n = sock.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the request ended early");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = sock.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the body ended early");
            buf.extend_from_slice(&chunk[..n]);
        }
        let answer = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(answer.as_bytes()).await.unwrap();
        Seen {
            head,
            body: buf[head_end..head_end + length].to_vec(),
        }
    });
    (base, task)
}

#[tokio::test]
async fn a_send_posts_the_v3_body_with_app_auth_and_classifies_the_answer() {
    let answer = r#"{"bulkId":"b1","messages":[{"messageId":"courier-k1","status":{"groupId":1,"groupName":"PENDING","id":26,"name":"PENDING_ACCEPTED"},"destination":"41793026727"}]}"#;
    let (base, server) = serve_once(200, answer).await;
    let c = Client::new(
        &settings(None),
        &format!("{base}/"),
        Some(CALLBACK),
        Duration::from_secs(5),
    )
    .unwrap();
    let out = c.send("courier-k1", "+41793026727", "Hello").await;
    assert!(
        matches!(&out, SendOutcome::Accepted(m) if m.key == "courier-k1" && m.status == Status::Accepted),
        "{out:?}"
    );
    let seen = server.await.unwrap();
    assert!(
        seen.head.starts_with("POST /sms/3/messages HTTP/1.1\r\n"),
        "{}",
        seen.head
    );
    assert!(
        seen.head
            .to_ascii_lowercase()
            .contains("\r\nauthorization: app api-key-123\r\n"),
        "{}",
        seen.head
    );
    let body: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(
        body["messages"][0]["destinations"][0]["messageId"],
        "courier-k1"
    );
    assert_eq!(
        body["messages"][0]["webhooks"]["delivery"]["url"],
        format!(
            "{CALLBACK}?key=courier-k1&token={}",
            hmac_hex(SECRET, "courier-k1")
        )
        .as_str()
    );
}

#[tokio::test]
async fn a_tier_a_lookup_asks_the_logs_by_message_id() {
    let (base, server) = serve_once(200, r#"{"results": []}"#).await;
    let c = Client::new(&settings(Some("on")), &base, None, Duration::from_secs(5)).unwrap();
    assert_eq!(c.lookup("courier-k 1").await, LookupOutcome::NotFound);
    let seen = server.await.unwrap();
    assert!(
        seen.head
            .starts_with("GET /sms/3/logs?messageId=courier-k%201 HTTP/1.1\r\n"),
        "{}",
        seen.head
    );
    assert!(
        seen.head
            .to_ascii_lowercase()
            .contains("\r\nauthorization: app api-key-123\r\n"),
        "{}",
        seen.head
    );
}

#[tokio::test]
async fn a_tier_c_lookup_asks_nothing() {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let c = Client::new(&settings(None), &base, None, Duration::from_millis(500)).unwrap();
    assert_eq!(c.tier(), Tier::C(UnknownPolicy::Hold));
    let out = c.lookup(KEY).await;
    assert!(
        matches!(&out, LookupOutcome::Unknown(why) if why.contains("no lookup")),
        "{out:?}"
    );
    // A request would have connected before the lookup returned.
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the client connected: {accepted:?}"
    );
}

#[tokio::test]
async fn a_send_that_reaches_no_one_is_unknown() {
    // A port that was free a moment ago: the connection is refused.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = Client::new(
        &settings(Some("on")),
        &format!("http://127.0.0.1:{port}"),
        None,
        Duration::from_secs(2),
    )
    .unwrap();
    let out = c.send(KEY, "+41793026727", "x").await;
    assert!(
        matches!(&out, SendOutcome::Unknown(why) if !why.contains(KEY)),
        "{out:?}"
    );
    let out = c.lookup(KEY).await;
    assert!(
        matches!(&out, LookupOutcome::Unknown(why) if !why.contains(KEY)),
        "{out:?}"
    );
}
