//! Twilio's adapter against the documented examples
//! (`tests/fixtures/twilio`, see its README): the send's form fields, the
//! answers classified, the statuses mapped as `docs/providers.md` states,
//! the `X-Twilio-Signature` test vectors, the status callback read as a
//! report, and the client over a local HTTP server.

use courier_core::step::SendAnswer;
use courier_core::Status;
use courier_provider::wire::MessageView;
use courier_provider::{LookupOutcome, Provider, SendOutcome};
use courier_providers::inbound::form_pairs;
use courier_providers::settings::{Settings, SettingsError};
use courier_providers::twilio::{self, Client, Hooks, Message, Sender};
use courier_providers::{Inbound, Parsed, Refusal, Report, Webhooks};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "courier-0192f0c1a2b37c4d8e9f0a1b2c3d4e5f";
const TOKEN: &str = "test-auth-token-5f1c";
const SID: &str = "ACaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const CALLBACK_BASE: &str = "https://courier.example/v1/webhooks/twilio";

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/twilio/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

fn settings(from: &str) -> Settings {
    Settings::from_pairs([
        ("TWILIO_ACCOUNT_SID", SID),
        ("TWILIO_AUTH_TOKEN", TOKEN),
        ("TWILIO_FROM", from),
    ])
}

fn client(base_url: &str, timeout: Duration) -> Client {
    Client::new(
        &settings("+14155552345"),
        base_url,
        Some(CALLBACK_BASE),
        timeout,
    )
    .unwrap()
}

// ---- the send's request ----------------------------------------------------

#[test]
fn the_send_form_uses_the_documented_names_and_encodes_as_the_example() {
    let example = json(&fixture("send_request.json"));
    let field = |n: &str| example[n].as_str().unwrap().to_string();
    let params = twilio::send_params(
        &field("To"),
        &field("Body"),
        &Sender::parse(&field("From")),
        Some(&field("StatusCallback")),
    );
    let names: Vec<&str> = params.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, ["To", "From", "Body", "StatusCallback"]);
    for name in &names {
        assert!(
            example.get(*name).is_some(),
            "{name} is not a documented field"
        );
    }
    // Each pair is encoded byte for byte as in the example's wire body.
    let wire = String::from_utf8(fixture("send_request.txt")).unwrap();
    let documented: Vec<&str> = wire.trim().split('&').collect();
    for pair in twilio::encode_form(&params).split('&') {
        assert!(documented.contains(&pair), "{pair} is not in {wire}");
    }
}

#[test]
fn a_messaging_service_is_sent_as_messaging_service_sid() {
    let c = Client::new(
        &settings("MGaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        "http://127.0.0.1:9",
        None,
        Duration::from_secs(1),
    )
    .unwrap();
    let pairs = form_pairs(c.request_body(KEY, "+14155550100", "hi there").as_bytes());
    assert_eq!(
        pairs,
        [
            ("To".to_string(), "+14155550100".to_string()),
            (
                "MessagingServiceSid".to_string(),
                "MGaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".to_string()
            ),
            ("Body".to_string(), "hi there".to_string()),
        ],
        "no callback base, no StatusCallback"
    );
}

#[test]
fn the_key_travels_in_the_status_callbacks_query() {
    let c = client("http://127.0.0.1:9", Duration::from_secs(1));
    let pairs = form_pairs(c.request_body(KEY, "+14155550100", "hi").as_bytes());
    let callback = pairs
        .iter()
        .find(|(k, _)| k == "StatusCallback")
        .map(|(_, v)| v.as_str());
    assert_eq!(
        callback,
        Some(format!("{CALLBACK_BASE}?key={KEY}").as_str())
    );
    assert!(pairs
        .iter()
        .any(|(k, v)| k == "From" && v == "+14155552345"));
}

#[test]
fn settings_are_checked_when_the_client_is_built() {
    let t = Duration::from_secs(1);
    let missing = Settings::from_pairs([("TWILIO_ACCOUNT_SID", SID), ("TWILIO_FROM", "+1")]);
    assert_eq!(
        Client::new(&missing, "http://h", None, t).unwrap_err(),
        SettingsError::Missing {
            provider: "twilio",
            name: "TWILIO_AUTH_TOKEN".into()
        }
    );
    assert!(matches!(
        Hooks::new(&missing),
        Err(SettingsError::Missing { .. })
    ));
    let underscore = Client::new(&settings("+1"), "http://h", Some("https://my_host/x"), t);
    assert!(
        matches!(underscore, Err(SettingsError::Invalid { ref why, .. }) if why.contains("underscore")),
        "{underscore:?}"
    );
    let bad_sid = Settings::from_pairs([
        ("TWILIO_ACCOUNT_SID", "AC/../x"),
        ("TWILIO_AUTH_TOKEN", TOKEN),
        ("TWILIO_FROM", "+1"),
    ]);
    assert!(matches!(
        Client::new(&bad_sid, "http://h", None, t),
        Err(SettingsError::Invalid { .. })
    ));
    assert!(matches!(
        Client::new(&settings("+1"), "not a url", None, t),
        Err(SettingsError::Invalid { .. })
    ));
}

#[test]
fn debug_never_shows_the_auth_token() {
    let c = client("http://127.0.0.1:9", Duration::from_secs(1));
    let h = Hooks::new(&settings("+1")).unwrap();
    let shown = format!("{c:?} {h:?} {c:#?} {h:#?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(shown.contains(SID), "the rest is shown: {shown}");
}

// ---- the answer -------------------------------------------------------------

#[test]
fn the_documented_201_is_accepted_with_its_sid_and_mapped_status() {
    let out = twilio::classify_send(201, &fixture("send_response_201.json"), KEY);
    assert_eq!(
        out,
        SendOutcome::Accepted(MessageView {
            id: "SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
            key: KEY.into(),
            status: Status::Accepted,
            updated_at: None,
        })
    );
}

#[test]
fn a_201_carries_its_status_mapped() {
    let mut v = json(&fixture("send_response_201.json"));
    for (twilio_status, courier) in [
        ("sent", Status::Sent),
        ("failed", Status::Failed),
        ("accepted", Status::Accepted),
        // Not a status courier maps: the message still exists.
        ("received", Status::Accepted),
    ] {
        v["status"] = twilio_status.into();
        let out = twilio::classify_send(201, &serde_json::to_vec(&v).unwrap(), KEY);
        assert!(
            matches!(&out, SendOutcome::Accepted(m) if m.status == courier),
            "{twilio_status}: {out:?}"
        );
    }
}

#[test]
fn the_documented_message_has_every_field_the_struct_writes() {
    let documented = json(&fixture("send_response_201.json"));
    let m: Message = serde_json::from_value(documented.clone()).unwrap();
    assert_eq!(serde_json::to_value(&m).unwrap(), documented);
}

#[test]
fn the_documented_400_is_a_rejection() {
    let out = twilio::classify_send(400, &fixture("error_400.json"), KEY);
    assert_eq!(
        out,
        SendOutcome::Rejected {
            status: 400,
            error: "error 20001: Bad request".into()
        }
    );
    assert!(matches!(
        out.answer(),
        SendAnswer::Rejected { status: 400, .. }
    ));
    let invalid_to = br#"{"code": 21211, "message": "Invalid 'To' Phone Number", "more_info": "https://www.twilio.com/docs/errors/21211", "status": 400}"#;
    assert!(matches!(
        twilio::classify_send(400, invalid_to, KEY),
        SendOutcome::Rejected { status: 400, ref error } if error.contains("21211")
    ));
}

#[test]
fn refused_credentials_are_not_the_actions_fault() {
    let body = br#"{"code": 20003, "message": "Authenticate", "more_info": "https://www.twilio.com/docs/errors/20003", "status": 401}"#;
    for status in [401, 403] {
        let out = twilio::classify_send(status, body, KEY);
        assert!(
            matches!(out.answer(), SendAnswer::CredentialsRefused(ref why) if why.contains("20003")),
            "{status}: {out:?}"
        );
    }
}

#[test]
fn unknown_is_never_no() {
    let rate_limited = br#"{"code": 20429, "message": "Too Many Requests", "more_info": "https://www.twilio.com/docs/errors/20429", "status": 429}"#;
    for status in [408, 409, 500, 502, 503, 504] {
        let out = twilio::classify_send(status, rate_limited, KEY);
        assert!(matches!(out, SendOutcome::Unknown(_)), "{status}: {out:?}");
    }
    // Twilio documents its 429 as never processed: nothing was created,
    // and the send may go again (after a backoff), at any tier.
    let out = twilio::classify_send(429, rate_limited, KEY);
    assert!(
        matches!(out, SendOutcome::NotCreated { status: 429, ref error, .. } if error.contains("20429")),
        "{out:?}"
    );
    let good = fixture("send_response_201.json");
    for (status, body) in [
        (201, &b"<html>gateway</html>"[..]),
        (201, &b"{}"[..]),
        (201, &b""[..]),
        (200, &good[..]),
        (202, &good[..]),
        (302, &b""[..]),
    ] {
        let out = twilio::classify_send(status, body, KEY);
        assert!(matches!(out, SendOutcome::Unknown(_)), "{status}: {out:?}");
    }
}

#[test]
fn every_documented_status_maps_as_the_providers_doc_states() {
    // docs/providers.md, Twilio, "Statuses", written out here on purpose.
    let documented: &[(&str, Option<Status>)] = &[
        ("accepted", Some(Status::Accepted)),
        ("scheduled", Some(Status::Accepted)),
        ("queued", Some(Status::Accepted)),
        ("sending", Some(Status::Accepted)),
        ("sent", Some(Status::Sent)),
        ("delivered", Some(Status::Delivered)),
        ("read", Some(Status::Delivered)),
        ("undelivered", Some(Status::Failed)),
        ("failed", Some(Status::Failed)),
        ("canceled", Some(Status::Failed)),
        ("partially_delivered", Some(Status::Sent)),
        ("receiving", None),
        ("received", None),
    ];
    for (name, courier) in documented {
        assert_eq!(twilio::map_status(name), *courier, "{name}");
    }
    assert_eq!(
        twilio::STATUSES.len(),
        documented.len(),
        "an undocumented status"
    );
    assert_eq!(twilio::map_status("Delivered"), None);
    assert_eq!(twilio::map_status("something_new"), None);
}

// ---- the signature ----------------------------------------------------------

struct Vector {
    name: String,
    auth_token: String,
    url: String,
    params: Vec<(String, String)>,
    body: Option<String>,
    expected: String,
}

fn vectors() -> Vec<Vector> {
    let file = json(&fixture("signature_vectors.json"));
    let vs: Vec<Vector> = file["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector {
            name: v["name"].as_str().unwrap().into(),
            auth_token: v["auth_token"].as_str().unwrap().into(),
            url: v["url"].as_str().unwrap().into(),
            params: v["params"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p[0].as_str().unwrap().to_string(),
                        p[1].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            body: v["body"].as_str().map(str::to_string),
            expected: v["expected_signature"].as_str().unwrap().into(),
        })
        .collect();
    assert_eq!(vs.len(), 7, "every vector of the fixture is read");
    vs
}

fn changed_one_char(s: &str) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    let i = chars.len() / 2;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[test]
fn the_documented_signature_vectors_pass() {
    for v in vectors() {
        assert_eq!(
            twilio::sign(&v.auth_token, &v.url, &v.params),
            v.expected,
            "{}",
            v.name
        );
        assert!(
            twilio::verify(&v.auth_token, &v.url, &v.params, &v.expected),
            "{}",
            v.name
        );
        if let Some(body) = &v.body {
            // A JSON body is signed through the URL's bodySHA256.
            let digest = hex::encode(Sha256::digest(body.as_bytes()));
            assert!(
                v.url.ends_with(&format!("bodySHA256={digest}")),
                "{}",
                v.name
            );
            assert!(v.params.is_empty());
        }
    }
}

#[test]
fn one_character_changed_anywhere_fails_the_signature() {
    for v in vectors() {
        let n = &v.name;
        let t = &v.auth_token;
        assert!(
            !twilio::verify(t, &v.url, &v.params, &changed_one_char(&v.expected)),
            "{n}: sig"
        );
        assert!(
            !twilio::verify(&changed_one_char(t), &v.url, &v.params, &v.expected),
            "{n}: token"
        );
        let other_url = v.url.replace("foo=1", "foo=2");
        assert!(
            !twilio::verify(t, &other_url, &v.params, &v.expected),
            "{n}: url"
        );
        if let Some((k, value)) = v.params.first() {
            let mut params = v.params.clone();
            params[0] = (k.clone(), changed_one_char(value));
            assert!(
                !twilio::verify(t, &v.url, &params, &v.expected),
                "{n}: param"
            );
        }
        assert!(!twilio::verify(t, &v.url, &v.params, ""), "{n}: empty");
    }
}

#[test]
fn duplicate_parameters_are_sorted_and_counted_once() {
    let v = vectors()
        .into_iter()
        .find(|v| v.name == "sdk_duplicate_params")
        .unwrap();
    let mut shuffled = v.params.clone();
    shuffled.reverse();
    assert_eq!(twilio::sign(&v.auth_token, &v.url, &shuffled), v.expected);
    // Dropping the repeated pair changes nothing; dropping a value does.
    let once: Vec<_> = v.params[..4].to_vec();
    assert_eq!(twilio::sign(&v.auth_token, &v.url, &once), v.expected);
    let without_5678: Vec<_> = v
        .params
        .iter()
        .filter(|(_, x)| x != "5678")
        .cloned()
        .collect();
    assert_ne!(
        twilio::sign(&v.auth_token, &v.url, &without_5678),
        v.expected
    );
}

#[test]
fn a_url_is_checked_with_and_without_its_default_port() {
    let by_name = |n: &str| vectors().into_iter().find(|v| v.name == n).unwrap();
    // Signed with :443 or :80; received without it (a proxy dropped it).
    for (name, without) in [
        (
            "sdk_https_port_443_added",
            "https://mycompany.com/myapp.php?foo=1&bar=2",
        ),
        (
            "sdk_http_port_80_added",
            "http://mycompany.com/myapp.php?foo=1&bar=2",
        ),
    ] {
        let v = by_name(name);
        assert!(
            twilio::verify(&v.auth_token, without, &v.params, &v.expected),
            "{name}"
        );
    }
    // Signed without the port; received with :443.
    let v = by_name("sdk_basic");
    let with = "https://mycompany.com:443/myapp.php?foo=1&bar=2";
    assert!(twilio::verify(&v.auth_token, with, &v.params, &v.expected));
    // Another port is part of what was signed, never dropped.
    let v = by_name("sdk_http_port_1234");
    let without = "http://mycompany.com/myapp.php?foo=1&bar=2";
    assert!(!twilio::verify(
        &v.auth_token,
        without,
        &v.params,
        &v.expected
    ));
    let other = "http://mycompany.com:1235/myapp.php?foo=1&bar=2";
    assert!(!twilio::verify(
        &v.auth_token,
        other,
        &v.params,
        &v.expected
    ));
}

// ---- the callbacks ----------------------------------------------------------

fn callback_url(key: &str) -> String {
    twilio::callback_url(CALLBACK_BASE, key)
}

/// The assembled callback, with `MessageStatus` set to `status`.
fn callback_body(status: &str) -> Vec<u8> {
    let body = String::from_utf8(fixture("status_callback.assembled.txt")).unwrap();
    let body = body.trim().replace(
        "MessageStatus=delivered",
        &format!("MessageStatus={status}"),
    );
    body.into_bytes()
}

/// Signs as Twilio does: over the URL it calls and the form's pairs.
fn signed(url: &str, body: &[u8], token: &str) -> Vec<(String, String)> {
    let sig = twilio::sign(token, url, &form_pairs(body));
    vec![
        (
            "content-type".into(),
            "application/x-www-form-urlencoded".into(),
        ),
        (twilio::HEADER.into(), sig),
    ]
}

fn receive(url: &str, headers: &[(String, String)], body: &[u8]) -> Result<Parsed, Refusal> {
    let hooks = Hooks::new(&settings("+1")).unwrap();
    hooks.receive(&Inbound {
        url,
        headers,
        body,
        now_s: 1_700_000_000,
    })
}

#[test]
fn a_signed_callback_reports_its_key_and_status() {
    let url = callback_url(KEY);
    let body = callback_body("delivered");
    let got = receive(&url, &signed(&url, &body, TOKEN), &body);
    assert_eq!(
        got,
        Ok(Parsed::Report(Report {
            key: KEY.into(),
            status: Status::Delivered,
            event_id: "SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:delivered".into(),
            message_id: "SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
        }))
    );
    let body = callback_body("read");
    let got = receive(&url, &signed(&url, &body, TOKEN), &body);
    assert!(
        matches!(&got, Ok(Parsed::Report(r)) if r.status == Status::Delivered && r.event_id.ends_with(":read")),
        "{got:?}"
    );
    let body = callback_body("undelivered");
    let got = receive(&url, &signed(&url, &body, TOKEN), &body);
    assert!(
        matches!(&got, Ok(Parsed::Report(r)) if r.status == Status::Failed),
        "{got:?}"
    );
}

#[test]
fn an_unsigned_callback_is_refused() {
    let url = callback_url(KEY);
    let body = callback_body("delivered");
    let headers = vec![(
        "content-type".to_string(),
        "application/x-www-form-urlencoded".to_string(),
    )];
    assert_eq!(receive(&url, &headers, &body), Err(Refusal::Unsigned));
}

#[test]
fn a_forged_callback_is_refused() {
    let url = callback_url(KEY);
    let body = callback_body("delivered");
    // Another account's token.
    assert_eq!(
        receive(&url, &signed(&url, &body, "another-token"), &body),
        Err(Refusal::Forged)
    );
    // A field changed after signing.
    let headers = signed(&url, &body, TOKEN);
    let failed = callback_body("failed");
    assert_eq!(receive(&url, &headers, &failed), Err(Refusal::Forged));
    // Another key in the URL: the key is part of what Twilio signed.
    let other = callback_url("courier-ffffffffffffffffffffffffffffffff");
    assert_eq!(receive(&other, &headers, &body), Err(Refusal::Forged));
}

#[test]
fn a_signed_callback_without_a_usable_key_or_fields_is_malformed() {
    let body = callback_body("delivered");
    for url in [CALLBACK_BASE.to_string(), format!("{CALLBACK_BASE}?key=")] {
        let got = receive(&url, &signed(&url, &body, TOKEN), &body);
        assert!(matches!(got, Err(Refusal::Malformed(_))), "{url}: {got:?}");
    }
    let url = callback_url(KEY);
    for drop in ["MessageSid", "MessageStatus"] {
        let body: Vec<(String, String)> = form_pairs(&callback_body("delivered"))
            .into_iter()
            .filter(|(k, _)| k != drop)
            .collect();
        let body = twilio::encode_form(&body).into_bytes();
        let got = receive(&url, &signed(&url, &body, TOKEN), &body);
        assert!(
            matches!(got, Err(Refusal::Malformed(ref w)) if w.contains(drop)),
            "{got:?}"
        );
    }
}

#[test]
fn a_status_courier_does_not_track_is_ignored() {
    let url = callback_url(KEY);
    for status in ["received", "a_new_status"] {
        let body = callback_body(status);
        let got = receive(&url, &signed(&url, &body, TOKEN), &body);
        assert!(matches!(got, Ok(Parsed::Ignored(_))), "{status}: {got:?}");
    }
}

#[test]
fn a_callback_seen_with_the_default_port_still_verifies() {
    let signed_url = callback_url(KEY);
    let seen = signed_url.replace("courier.example/", "courier.example:443/");
    let body = callback_body("sent");
    let got = receive(&seen, &signed(&signed_url, &body, TOKEN), &body);
    assert!(
        matches!(&got, Ok(Parsed::Report(r)) if r.status == Status::Sent),
        "{got:?}"
    );
}

// ---- the client over HTTP ---------------------------------------------------

/// A request as a one-shot server read it.
struct Seen {
    head: String,
    body: Vec<u8>,
}

/// Serves one connection: reads one request, answers `answer` (or never
/// answers when `None`), and hands back what it read.
async fn one_shot(answer: Option<(u16, Vec<u8>)>) -> (String, tokio::task::JoinHandle<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let (head, body) = loop {
            let n = conn.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the client hung up before its request ended");
            buf.extend_from_slice(&chunk[..n]);
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break (head, buf[end + 4..end + 4 + len].to_vec());
            }
        };
        match answer {
            Some((status, body)) => {
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                conn.write_all(resp.as_bytes()).await.unwrap();
                conn.write_all(&body).await.unwrap();
            }
            None => {
                // Hold the connection past the client's time-out.
                let _ = conn.read(&mut chunk).await;
            }
        }
        Seen { head, body }
    });
    (base, task)
}

#[tokio::test]
async fn the_client_posts_the_form_with_basic_auth_and_reads_the_201() {
    let (base, server) = one_shot(Some((201, fixture("send_response_201.json")))).await;
    let c = client(&base, Duration::from_secs(5));
    let out = c.send(KEY, "+14155552345", "Hello! 👍").await;
    assert!(
        matches!(&out, SendOutcome::Accepted(m) if m.id == "SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" && m.key == KEY),
        "{out:?}"
    );
    let seen = server.await.unwrap();
    let first = seen.head.lines().next().unwrap();
    assert_eq!(
        first,
        format!("POST /2010-04-01/Accounts/{SID}/Messages.json HTTP/1.1")
    );
    let header = |name: &str| {
        seen.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let expected_auth = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{SID}:{TOKEN}")
        )
    );
    assert_eq!(header("authorization"), Some(expected_auth));
    assert_eq!(
        header("content-type").as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    let pairs = form_pairs(&seen.body);
    let get = |n: &str| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(get("To"), Some("+14155552345"));
    assert_eq!(get("From"), Some("+14155552345"));
    assert_eq!(get("Body"), Some("Hello! 👍"));
    assert_eq!(
        get("StatusCallback"),
        Some(format!("{CALLBACK_BASE}?key={KEY}").as_str())
    );
}

#[tokio::test]
async fn the_client_reads_refusals_and_faults_by_what_comes_next() {
    let (base, server) = one_shot(Some((400, fixture("error_400.json")))).await;
    let out = client(&base, Duration::from_secs(5))
        .send(KEY, "+1", "x")
        .await;
    assert!(
        matches!(out, SendOutcome::Rejected { status: 400, .. }),
        "{out:?}"
    );
    server.await.unwrap();

    let (base, server) = one_shot(Some((500, b"{}".to_vec()))).await;
    let out = client(&base, Duration::from_secs(5))
        .send(KEY, "+1", "x")
        .await;
    assert!(matches!(out, SendOutcome::Unknown(_)), "{out:?}");
    server.await.unwrap();

    // No answer within the time-out: the message may exist.
    let (base, server) = one_shot(None).await;
    let out = client(&base, Duration::from_millis(300))
        .send(KEY, "+1", "x")
        .await;
    assert!(
        matches!(&out, SendOutcome::Unknown(why) if why.contains("time-out")),
        "{out:?}"
    );
    assert!(!format!("{out:?}").contains(TOKEN));
    server.await.unwrap();
}

#[tokio::test]
async fn a_refused_connection_is_unknown_and_lookup_asks_nobody() {
    // A port nothing listens on: bound, then closed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let c = client(&base, Duration::from_secs(2));
    let out = c.send(KEY, "+1", "x").await;
    assert!(matches!(out, SendOutcome::Unknown(_)), "{out:?}");
    assert_eq!(
        c.lookup(KEY).await,
        LookupOutcome::Unknown("twilio has no lookup by courier's key".into())
    );
}
