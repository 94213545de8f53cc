//! Telnyx's adapter against the documented examples
//! (`tests/fixtures/telnyx`, see its README): the send body's fields, the
//! answers classified, the statuses mapped, the Ed25519 webhook signature
//! (signed here with a key from a fixed seed: Telnyx publishes no test
//! vector) and the webhook read as a report.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use courier_core::step::SendAnswer;
use courier_core::Status;
use courier_provider::wire::MessageView;
use courier_provider::{LookupOutcome, Provider, SendOutcome};
use courier_providers::settings::{Settings, SettingsError};
use courier_providers::telnyx::{self, Client, Hooks, SendBody};
use courier_providers::{Inbound, Parsed, Refusal, Report, Webhooks};
use ed25519_dalek::Signer;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "courier-0192f0c1a2b37c4d8e9f0a1b2c3d4e5f";
const NOW: i64 = 1_700_000_000;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/telnyx/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The test's Telnyx key: a fixed seed, independent of the adapter's own
/// signing code.
fn test_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])
}

fn test_public_key() -> String {
    BASE64.encode(test_key().verifying_key().to_bytes())
}

/// Signs as Telnyx does: Ed25519 over `"{timestamp}|{body}"`, base64.
fn telnyx_sign(key: &ed25519_dalek::SigningKey, timestamp: &str, body: &[u8]) -> String {
    let mut message = format!("{timestamp}|").into_bytes();
    message.extend_from_slice(body);
    BASE64.encode(key.sign(&message).to_bytes())
}

/// The documented `message.sent` event, its `webhook_url` courier's (with
/// the key) and its recipient's status `status`.
fn event_with_key(status: &str) -> Vec<u8> {
    let mut v = json(&fixture("webhook_message_sent.json"));
    v["data"]["payload"]["webhook_url"] =
        telnyx::webhook_url("https://courier.example/v1/webhooks/telnyx", KEY).into();
    v["data"]["payload"]["to"][0]["status"] = status.into();
    serde_json::to_vec_pretty(&v).unwrap()
}

fn headers(signature: Option<String>, timestamp: Option<String>) -> Vec<(String, String)> {
    let mut h = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(s) = signature {
        h.push((telnyx::SIGNATURE_HEADER.to_string(), s));
    }
    if let Some(t) = timestamp {
        h.push((telnyx::TIMESTAMP_HEADER.to_string(), t));
    }
    h
}

fn receive(
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    now_s: i64,
) -> Result<Parsed, Refusal> {
    let hooks = Hooks::from_public_key(&test_public_key()).unwrap();
    hooks.receive(&Inbound {
        url,
        headers,
        body,
        now_s,
    })
}

/// A webhook signed at `signed_at`, received at `NOW`.
fn receive_signed_at(body: &[u8], signed_at: i64) -> Result<Parsed, Refusal> {
    let ts = signed_at.to_string();
    let h = headers(Some(telnyx_sign(&test_key(), &ts, body)), Some(ts));
    receive("https://courier.example/v1/webhooks/telnyx", &h, body, NOW)
}

fn report(status: Status) -> Parsed {
    Parsed::Report(Report {
        key: KEY.to_string(),
        status,
        event_id: "86f58db9-0fe3-4adc-9d1f-46e66e6e9323".to_string(),
        message_id: "40385f64-5717-4562-b3fc-2c963f66afa6".to_string(),
    })
}

fn settings() -> Settings {
    Settings::from_pairs([
        ("TELNYX_API_KEY", "KEY0123-very-secret"),
        ("TELNYX_FROM", "+18445550001"),
        ("TELNYX_PUBLIC_KEY", "ignored-by-the-client"),
    ])
}

// ---- the send request ----

#[test]
fn the_send_body_uses_the_documented_field_names() {
    let documented = json(&fixture("send_request.json"));
    let documented = documented.as_object().unwrap();
    let url = telnyx::webhook_url("https://courier.example/v1/webhooks/telnyx", KEY);
    let body = SendBody::new("+18445550001", "+18665550001", "Hello, World!", Some(url));
    let sent = serde_json::to_value(&body).unwrap();
    let sent = sent.as_object().unwrap();
    for name in sent.keys() {
        assert!(
            documented.contains_key(name),
            "{name} is not a CreateMessageRequest field"
        );
    }
    assert_eq!(sent["from"], "+18445550001");
    assert_eq!(sent["to"], "+18665550001");
    assert_eq!(sent["text"], "Hello, World!");
    assert_eq!(sent["type"], "SMS");
    assert_eq!(
        sent["webhook_url"],
        format!("https://courier.example/v1/webhooks/telnyx?key={KEY}")
    );
    assert_eq!(sent["use_profile_webhooks"], false);
    assert_eq!(
        telnyx::key_of_url(sent["webhook_url"].as_str().unwrap()).as_deref(),
        Some(KEY)
    );
    // Without a callback, no webhook fields at all.
    let bare = serde_json::to_value(SendBody::new("+1", "+2", "t", None)).unwrap();
    assert!(bare.get("webhook_url").is_none() && bare.get("use_profile_webhooks").is_none());
}

#[test]
fn the_documented_request_reads_as_a_send_body() {
    // The double parses requests with the same type: the documented (MMS)
    // example, with fields courier never sends, must still read.
    let body: SendBody = serde_json::from_slice(&fixture("send_request.json")).unwrap();
    assert_eq!(body.to, "+18445550001");
    assert_eq!(body.text, "Hello, World!");
    assert_eq!(
        body.webhook_url.as_deref(),
        Some("http://example.com/webhooks")
    );
    assert_eq!(body.use_profile_webhooks, Some(true));
}

// ---- the answer ----

#[test]
fn the_documented_200_is_accepted_with_its_id_and_status() {
    let out = telnyx::classify_send(200, &fixture("send_response_200.json"), KEY);
    assert_eq!(
        out,
        SendOutcome::Accepted(MessageView {
            id: "40385f64-5717-4562-b3fc-2c963f66afa6".to_string(),
            key: KEY.to_string(),
            status: Status::Accepted,
            updated_at: Some("2019-01-23T18:10:02.574Z".to_string()),
        })
    );
    // The recipient's status is mapped, not assumed.
    let mut v = json(&fixture("send_response_200.json"));
    v["data"]["to"][0]["status"] = "sending_failed".into();
    let out = telnyx::classify_send(200, &serde_json::to_vec(&v).unwrap(), KEY);
    assert!(matches!(out, SendOutcome::Accepted(m) if m.status == Status::Failed));
}

#[test]
fn not_authorized_is_credentials_refused() {
    for status in [401, 403] {
        let out = telnyx::classify_send(status, &fixture("error_not_authorized.json"), KEY);
        assert_eq!(
            out,
            SendOutcome::Rejected {
                status,
                error:
                    "10006 Not authorized: You are not authorized to access the requested resource."
                        .to_string()
            }
        );
        assert!(matches!(out.answer(), SendAnswer::CredentialsRefused(_)));
    }
}

#[test]
fn invalid_requests_are_refused() {
    let body = br#"{"errors":[{"code":"10002","title":"Invalid phone number","detail":"The phone number is invalid."}]}"#;
    for status in [400, 404, 422] {
        let out = telnyx::classify_send(status, body, KEY);
        assert!(
            matches!(&out, SendOutcome::Rejected { status: s, error } if *s == status && error.starts_with("10002 Invalid phone number")),
            "{status}: {out:?}"
        );
        assert!(matches!(out.answer(), SendAnswer::Rejected { .. }));
    }
}

#[test]
fn a_429_is_an_unknown_outcome() {
    // Telnyx does not state that a rate-limited request created nothing.
    let out = telnyx::classify_send(429, &fixture("error_429.json"), KEY);
    assert!(
        matches!(&out, SendOutcome::Throttled { error, .. } if error.contains("10011")),
        "{out:?}"
    );
    assert_eq!(out.answer(), SendAnswer::Unknown);
    assert!(out.throttle().is_some(), "a 429 pauses the workers");
}

#[test]
fn server_faults_and_unreadable_answers_are_unknown() {
    for status in [408, 409, 500, 502, 503, 504] {
        assert!(
            matches!(
                telnyx::classify_send(status, b"", KEY),
                SendOutcome::Unknown(_)
            ),
            "{status}"
        );
    }
    for body in [
        &b"not json"[..],
        br#"{"data":{}}"#,
        br#"{"data":{"id":""}}"#,
    ] {
        assert!(matches!(
            telnyx::classify_send(200, body, KEY),
            SendOutcome::Unknown(_)
        ));
    }
    assert!(matches!(
        telnyx::classify_send(302, b"", KEY),
        SendOutcome::Unknown(_)
    ));
}

#[test]
fn every_documented_status_is_mapped() {
    let table = [
        ("queued", Some(Status::Accepted)),
        ("sending", Some(Status::Accepted)),
        ("sent", Some(Status::Sent)),
        ("delivery_unconfirmed", Some(Status::Sent)),
        ("delivered", Some(Status::Delivered)),
        ("sending_failed", Some(Status::Failed)),
        ("delivery_failed", Some(Status::Failed)),
        ("expired", Some(Status::Failed)),
        ("webhook_delivered", None),
        ("DELIVERED", None),
        ("", None),
    ];
    for (telnyx_status, courier) in table {
        assert_eq!(
            telnyx::map_status(telnyx_status),
            courier,
            "{telnyx_status}"
        );
    }
}

// ---- the signature ----

#[test]
fn a_signed_documented_webhook_passes_and_reports_its_key() {
    let body = event_with_key("sent");
    assert_eq!(receive_signed_at(&body, NOW), Ok(report(Status::Sent)));
    // The documented body byte for byte (its webhook_url carries no key):
    // the signature passes, and the event is refused as courier's.
    let verbatim = fixture("webhook_message_sent.json");
    assert!(matches!(
        receive_signed_at(&verbatim, NOW),
        Err(Refusal::Malformed(why)) if why.contains("webhook_url")
    ));
}

#[test]
fn a_changed_byte_or_another_key_is_forged() {
    let body = event_with_key("sent");
    let ts = NOW.to_string();
    let sig = telnyx_sign(&test_key(), &ts, &body);
    for i in [0, body.len() / 2, body.len() - 1] {
        let mut changed = body.clone();
        changed[i] ^= 0x01;
        let h = headers(Some(sig.clone()), Some(ts.clone()));
        assert_eq!(
            receive("u", &h, &changed, NOW),
            Err(Refusal::Forged),
            "byte {i}"
        );
    }
    // The timestamp is signed too.
    let h = headers(Some(sig.clone()), Some((NOW - 1).to_string()));
    assert_eq!(receive("u", &h, &body, NOW), Err(Refusal::Forged));
    let other = ed25519_dalek::SigningKey::from_bytes(&[8u8; 32]);
    let h = headers(Some(telnyx_sign(&other, &ts, &body)), Some(ts.clone()));
    assert_eq!(receive("u", &h, &body, NOW), Err(Refusal::Forged));
    for garbage in ["", "!!!", "AAAA"] {
        let h = headers(Some(garbage.to_string()), Some(ts.clone()));
        assert_eq!(
            receive("u", &h, &body, NOW),
            Err(Refusal::Forged),
            "{garbage:?}"
        );
    }
}

#[test]
fn a_missing_header_is_unsigned() {
    let body = event_with_key("sent");
    let ts = NOW.to_string();
    let sig = telnyx_sign(&test_key(), &ts, &body);
    for h in [
        headers(None, Some(ts.clone())),
        headers(Some(sig), None),
        headers(None, None),
    ] {
        assert_eq!(receive("u", &h, &body, NOW), Err(Refusal::Unsigned));
    }
}

#[test]
fn the_tolerance_is_300_seconds_either_way() {
    let body = event_with_key("sent");
    for offset in [-300, -299, 0, 299, 300] {
        assert_eq!(
            receive_signed_at(&body, NOW + offset),
            Ok(report(Status::Sent)),
            "{offset}"
        );
    }
    assert_eq!(
        receive_signed_at(&body, NOW - 301),
        Err(Refusal::Stale { age_s: 301 })
    );
    assert_eq!(
        receive_signed_at(&body, NOW + 301),
        Err(Refusal::Stale { age_s: -301 })
    );
}

#[test]
fn the_adapters_signature_is_telnyxs() {
    // `sign` (the double's) verifies under the standard algorithm, and the
    // key pair of a secret is the same every time.
    let (key, public) = telnyx::keypair_from_secret("webhook-secret");
    assert_eq!(public, telnyx::keypair_from_secret("webhook-secret").1);
    let body = event_with_key("delivered");
    let sig = telnyx::sign(&key, NOW, &body);
    let verifying = ed25519_dalek::VerifyingKey::from_bytes(
        &BASE64.decode(&public).unwrap().try_into().unwrap(),
    )
    .unwrap();
    let mut message = format!("{NOW}|").into_bytes();
    message.extend_from_slice(&body);
    let sig_bytes: [u8; 64] = BASE64.decode(&sig).unwrap().try_into().unwrap();
    verifying
        .verify_strict(&message, &ed25519_dalek::Signature::from_bytes(&sig_bytes))
        .unwrap();
    let hooks = Hooks::from_public_key(&public).unwrap();
    let h = headers(Some(sig), Some(NOW.to_string()));
    let got = hooks.receive(&Inbound {
        url: "u",
        headers: &h,
        body: &body,
        now_s: NOW,
    });
    assert_eq!(got, Ok(report(Status::Delivered)));
}

// ---- the webhook's content ----

#[test]
fn the_key_comes_from_the_signed_body_not_the_request_line() {
    let body = event_with_key("delivered");
    let ts = NOW.to_string();
    let h = headers(Some(telnyx_sign(&test_key(), &ts, &body)), Some(ts));
    let got = receive(
        "https://courier.example/v1/webhooks/telnyx?key=courier-someone-else",
        &h,
        &body,
        NOW,
    );
    assert_eq!(got, Ok(report(Status::Delivered)));
}

#[test]
fn finalized_events_report_their_final_status() {
    let mut v = json(&event_with_key("delivery_failed"));
    v["data"]["event_type"] = "message.finalized".into();
    let body = serde_json::to_vec(&v).unwrap();
    assert_eq!(receive_signed_at(&body, NOW), Ok(report(Status::Failed)));
}

#[test]
fn other_events_and_untracked_statuses_are_ignored() {
    let mut v = json(&event_with_key("sent"));
    v["data"]["event_type"] = "message.received".into();
    let body = serde_json::to_vec(&v).unwrap();
    assert!(matches!(
        receive_signed_at(&body, NOW),
        Ok(Parsed::Ignored(_))
    ));
    let body = event_with_key("webhook_delivered");
    assert!(matches!(
        receive_signed_at(&body, NOW),
        Ok(Parsed::Ignored(_))
    ));
}

#[test]
fn events_without_what_courier_needs_are_malformed() {
    let cut = |path: &[&str]| {
        let mut v = json(&event_with_key("sent"));
        let mut node = &mut v;
        for p in &path[..path.len() - 1] {
            node = &mut node[*p];
        }
        node.as_object_mut().unwrap().remove(path[path.len() - 1]);
        serde_json::to_vec(&v).unwrap()
    };
    for path in [
        &["data", "id"][..],
        &["data", "payload", "id"],
        &["data", "payload", "webhook_url"],
        &["data", "payload", "to"],
    ] {
        let body = cut(path);
        assert!(
            matches!(receive_signed_at(&body, NOW), Err(Refusal::Malformed(_))),
            "{path:?}"
        );
    }
    assert!(matches!(
        receive_signed_at(b"[]", NOW),
        Err(Refusal::Malformed(_))
    ));
}

// ---- settings and secrets ----

#[test]
fn the_public_key_setting_is_required_and_checked() {
    let missing = Hooks::new(&Settings::from_pairs([("TELNYX_API_KEY", "k")])).unwrap_err();
    assert!(
        matches!(missing, SettingsError::Missing { ref name, .. } if name == "TELNYX_PUBLIC_KEY")
    );
    for bad in ["not base64!", "AAAA", &BASE64.encode([0u8; 33])] {
        let err = Hooks::new(&Settings::from_pairs([("TELNYX_PUBLIC_KEY", bad)])).unwrap_err();
        assert!(
            matches!(err, SettingsError::Invalid { ref name, .. } if name == "TELNYX_PUBLIC_KEY"),
            "{bad}"
        );
    }
    let ok = Settings::from_pairs([("TELNYX_PUBLIC_KEY", test_public_key().as_str())]);
    assert!(Hooks::new(&ok).is_ok());
    assert_eq!(
        telnyx::SETTINGS,
        ["TELNYX_API_KEY", "TELNYX_FROM", "TELNYX_PUBLIC_KEY"]
    );
}

#[test]
fn debug_never_shows_a_secret() {
    let client = Client::new(&settings(), telnyx::BASE_URL, None, Duration::from_secs(1)).unwrap();
    let printed = format!("{client:?}");
    assert!(!printed.contains("very-secret"), "{printed}");
    assert!(printed.contains("redacted"), "{printed}");
    let (key, _) = telnyx::keypair_from_secret("s");
    let seed_hex = format!("{:?}", test_key().to_bytes());
    let printed = format!("{key:?} {:?}", telnyx::SigningKey::from_seed([7u8; 32]));
    assert_eq!(printed, "SigningKey(<redacted>) SigningKey(<redacted>)");
    assert!(!printed.contains(&seed_hex));
}

#[test]
fn the_client_needs_its_key_and_number() {
    for missing in ["TELNYX_API_KEY", "TELNYX_FROM"] {
        let pairs = [("TELNYX_API_KEY", "k"), ("TELNYX_FROM", "+1")];
        let s = Settings::from_pairs(pairs.into_iter().filter(|(k, _)| *k != missing));
        let err = Client::new(&s, telnyx::BASE_URL, None, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, SettingsError::Missing { ref name, .. } if name == missing));
    }
    let s = Settings::from_pairs([("TELNYX_API_KEY", "k\nx"), ("TELNYX_FROM", "+1")]);
    assert!(matches!(
        Client::new(&s, telnyx::BASE_URL, None, Duration::from_secs(1)),
        Err(SettingsError::Invalid { .. })
    ));
}

// ---- the client over HTTP ----

/// One HTTP exchange on a local port: the request as read, and `answer`
/// (status line and body) written back.
async fn serve_once(answer: (u16, Vec<u8>)) -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = sock.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request ended early");
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    break;
                }
            }
        }
        let (status, body) = answer;
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        sock.write_all(&body).await.unwrap();
        String::from_utf8(got).unwrap()
    });
    (base, task)
}

#[tokio::test]
async fn the_client_posts_the_body_with_its_bearer_key() {
    let (base, server) = serve_once((200, fixture("send_response_200.json"))).await;
    let client = Client::new(
        &settings(),
        &format!("{base}/"),
        Some("https://courier.example/v1/webhooks/telnyx"),
        Duration::from_secs(5),
    )
    .unwrap();
    let out = client.send(KEY, "+18665550001", "Hello, World!").await;
    assert!(
        matches!(&out, SendOutcome::Accepted(m) if m.id == "40385f64-5717-4562-b3fc-2c963f66afa6" && m.key == KEY),
        "{out:?}"
    );
    let request = server.await.unwrap();
    let (head, body) = request.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("POST /v2/messages HTTP/1.1"), "{head}");
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("authorization: bearer key0123-very-secret"),
        "{head}"
    );
    assert!(head.contains("content-type: application/json"), "{head}");
    let sent: SendBody = serde_json::from_str(body).unwrap();
    assert_eq!(
        sent,
        SendBody::new(
            "+18445550001",
            "+18665550001",
            "Hello, World!",
            Some(format!(
                "https://courier.example/v1/webhooks/telnyx?key={KEY}"
            ))
        )
    );
}

#[tokio::test]
async fn the_client_classifies_refusals_and_failures() {
    let (base, server) = serve_once((401, fixture("error_not_authorized.json"))).await;
    let client = Client::new(&settings(), &base, None, Duration::from_secs(5)).unwrap();
    let out = client.send(KEY, "+18665550001", "hi").await;
    assert!(
        matches!(out, SendOutcome::Rejected { status: 401, .. }),
        "{out:?}"
    );
    server.await.unwrap();
    // Nothing listens on a port just released: the outcome is unknown.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let client = Client::new(
        &settings(),
        &format!("http://127.0.0.1:{port}"),
        None,
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(matches!(
        client.send(KEY, "+18665550001", "hi").await,
        SendOutcome::Unknown(_)
    ));
    assert!(matches!(
        client.lookup(KEY).await,
        LookupOutcome::Unknown(_)
    ));
}
