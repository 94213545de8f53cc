//! Hostile input against a live `courier serve` (the built binary, a real
//! PostgreSQL): forged, missing and replayed signatures; bodies and heads over
//! the limits; slow clients; unknown stores, keys, routes and ids; malformed
//! UTF-8 everywhere; wrong bearer tokens. Every case must get a clear 4xx (a
//! JSON error where the request reached courier) or a bounded wait; the server
//! must stay up and answer others meanwhile; and the database must show that
//! nothing changed.
//!
//! The server runs with short time-outs (1 s for a request head and for a
//! whole request) so that the slow-client cases take seconds, not minutes.
//!
//! Well-formed requests (an action to work on, an ordinary read, fields
//! whose values are out of their limits) go through the typed client,
//! `courier_client`; requests that are malformed on purpose (bad JSON,
//! bad headers, bad bytes) are built by hand.

#[path = "hostile/live.rs"]
mod live;
#[path = "hostile/raw.rs"]
mod raw;

use courier_client::{Client, ClientError, EnqueueRequest, Enqueued, StoreSettings};
use courier_provider::signature;
use courier_store::PgStore;
use courier_testkit::fixtures;
use live::{db_state, fresh_db, Service};
use raw::{read_answer, request, send, trickle, Ended};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SECRET: &str = "hostile-secret";
const TOKEN: &str = "hostile-token-0123456789";
/// The server's head and request time-outs in these tests.
const CUT_MS: u64 = 1_000;
/// How long any single hostile case may take to be refused.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

struct Live {
    server: Service,
    store: PgStore,
    /// The database `courier serve` runs on.
    db_url: String,
    /// For the requests built by hand.
    http: reqwest::Client,
    /// For the well-formed ones, with the server's token.
    client: Client,
}

impl Live {
    async fn start(tag: &str) -> Live {
        let (url, store) = fresh_db(tag).await;
        let cut = CUT_MS.to_string();
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
                TOKEN,
                "--http-timeout-ms",
                &cut,
                "--header-read-timeout-ms",
                &cut,
                "--sample-interval-ms",
                "500",
            ],
            true,
        );
        let client =
            Client::with_timeout(&server.url, Some(TOKEN.to_string()), ANSWER_WITHIN).unwrap();
        Live {
            server,
            store,
            db_url: url,
            http: reqwest::Client::builder()
                .timeout(ANSWER_WITHIN)
                .build()
                .unwrap(),
            client,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url)
    }

    /// The server is up and its database answers.
    async fn assert_healthy(&mut self) {
        self.server.assert_running();
        let r = self.http.get(self.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "healthz");
    }

    /// An enqueue built by hand: its status and JSON answer.
    async fn enqueue_raw(&self, body: Vec<u8>) -> (u16, Value) {
        let r = self
            .http
            .post(self.url("/v1/actions"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// An action whose intent is written and accepted: a key webhooks can name.
    async fn accepted_action(&self) -> (i64, String) {
        let made = self.client.enqueue(&good("k1")).await.unwrap();
        assert!(made.created(), "{made:?}");
        let held = fixtures::settled(&self.store).await;
        (held.lease.action_id, held.key)
    }
}

/// A well-formed enqueue for store `s1`.
fn good(key: &str) -> EnqueueRequest {
    EnqueueRequest::new("s1", "+15551234567", "hi", key)
}

fn event(id: &str, key: &str, status: &str) -> String {
    json!({"event_id": id, "message_id": "msg_1", "key": key, "status": status,
           "occurred_at": "2026-01-01T00:00:00Z"})
    .to_string()
}

/// A forged webhook: its name, its headers, its body.
type Forged = (&'static str, Vec<(&'static str, Vec<u8>)>, String);

/// Every way we know to forge, strip or bend the signature of `genuine`.
fn forged_webhooks(genuine: &str, good_sig: &str, other_body: String) -> Vec<Forged> {
    let sig = |v: Vec<u8>| vec![("X-Signature", v)];
    let genuine = genuine.to_string();
    vec![
        ("no signature", vec![], genuine.clone()),
        ("empty signature", sig(b"".to_vec()), genuine.clone()),
        ("prefix only", sig(b"sha256=".to_vec()), genuine.clone()),
        (
            "wrong secret",
            sig(signature::sign(b"guess", genuine.as_bytes()).into_bytes()),
            genuine.clone(),
        ),
        (
            "signature of another body (replayed onto a changed status)",
            sig(good_sig.as_bytes().to_vec()),
            other_body,
        ),
        (
            "genuine signature, body with a trailing space",
            sig(good_sig.as_bytes().to_vec()),
            format!("{genuine} "),
        ),
        (
            "truncated signature",
            sig(good_sig.as_bytes()[..good_sig.len() - 2].to_vec()),
            genuine.clone(),
        ),
        (
            "another algorithm's prefix",
            sig(good_sig.replacen("sha256=", "sha1=", 1).into_bytes()),
            genuine.clone(),
        ),
        ("not hex", sig(b"sha256=zzzz".to_vec()), genuine.clone()),
        (
            "a wrong signature first, the right one second",
            vec![
                ("X-Signature", b"sha256=00".to_vec()),
                ("X-Signature", good_sig.as_bytes().to_vec()),
            ],
            genuine.clone(),
        ),
        (
            "a signature that is not UTF-8",
            sig(vec![b's', b'h', b'a', 0xff, 0xfe]),
            genuine,
        ),
    ]
}

#[tokio::test]
async fn forged_missing_and_replayed_signatures_change_nothing() {
    let mut live = Live::start("sig").await;
    let (_, key) = live.accepted_action().await;
    let genuine = event("evt_1", &key, "delivered");
    let good_sig = signature::sign(SECRET.as_bytes(), genuine.as_bytes());
    let before = db_state(&live.store).await;

    let forged = forged_webhooks(&genuine, &good_sig, event("evt_1", &key, "failed"));
    let n_forged = forged.len();
    for (name, headers, body) in forged {
        let hs: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        let a = send(
            live.server.addr(),
            &request("POST", b"/v1/webhooks/provider", &hs, body.as_bytes()),
            ANSWER_WITHIN,
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: no answer ({e:?})"));
        assert_eq!(
            a.status,
            401,
            "{name}: {}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(a.error_code().as_deref(), Some("bad_signature"), "{name}");
    }
    assert_eq!(
        db_state(&live.store).await,
        before,
        "a forged webhook changed the database"
    );
    genuine_once_and_replays_absorbed(&live, &genuine, &good_sig).await;
    live.assert_healthy().await;
    eprintln!("signatures: {n_forged} forged variants refused with 401, 2 replays absorbed");
}

/// The genuine event is merged once; its replays are absorbed.
async fn genuine_once_and_replays_absorbed(live: &Live, genuine: &str, good_sig: &str) {
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let r = live
            .http
            .post(live.url("/v1/webhooks/provider"))
            .header("x-signature", good_sig)
            .body(genuine.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        outcomes.push(r.json::<Value>().await.unwrap()["outcome"].clone());
    }
    assert_eq!(
        outcomes,
        [json!("advanced"), json!("duplicate"), json!("duplicate")]
    );
    let client = live.store.client().await.unwrap();
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM webhook_events),
                    (SELECT count(*) FROM events WHERE kind = 'duplicate_webhook'),
                    (SELECT status FROM outbox)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1, "one event id recorded");
    assert_eq!(row.get::<_, i64>(1), 2, "two replays absorbed");
    assert_eq!(row.get::<_, String>(2), "delivered");
}

#[tokio::test]
async fn bodies_and_heads_over_the_limits_are_refused() {
    let mut live = Live::start("size").await;
    let addr = live.server.addr();
    let auth = format!("Bearer {TOKEN}");
    let auth = auth.as_bytes();
    let before = db_state(&live.store).await;
    oversized_bodies_are_413(addr, auth).await;
    oversized_heads_are_431_or_closed(addr).await;

    // JSON nested past serde's recursion limit.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let a = send(
        addr,
        &request(
            "POST",
            b"/v1/actions",
            &[("Authorization", auth)],
            deep.as_bytes(),
        ),
        ANSWER_WITHIN,
    )
    .await
    .unwrap();
    assert_eq!(
        (a.status, a.error_code().as_deref()),
        (400, Some("bad_json"))
    );

    assert_eq!(db_state(&live.store).await, before);
    live.assert_healthy().await;
}

/// Bodies over the payload limit: declared, declared absurdly, and chunked.
async fn oversized_bodies_are_413(addr: std::net::SocketAddr, auth: &[u8]) {
    let limit = courier_core::Limits::default().payload_bytes_max as usize;
    // One byte over the payload limit, with its length declared.
    let body = format!(
        r#"{{"store":"s1","to":"+15551234567","body":"x","key":"{}"}}"#,
        "k".repeat(limit)
    );
    let a = send(
        addr,
        &request(
            "POST",
            b"/v1/actions",
            &[("Authorization", auth)],
            body.as_bytes(),
        ),
        ANSWER_WITHIN,
    )
    .await
    .unwrap();
    assert_eq!(
        (a.status, a.error_code().as_deref()),
        (413, Some("payload_too_large"))
    );

    // A declared length of a terabyte, and no body: refused before reading,
    // so well before the request time-out.
    let t = Instant::now();
    let head = format!(
        "POST /v1/actions HTTP/1.1\r\nHost: c\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 1000000000000\r\n\r\n"
    );
    let a = send(addr, head.as_bytes(), ANSWER_WITHIN).await.unwrap();
    assert_eq!(a.status, 413, "{}", String::from_utf8_lossy(&a.body));
    assert!(
        t.elapsed() < Duration::from_millis(CUT_MS),
        "a declared huge body must be refused at once, took {:?}",
        t.elapsed()
    );

    // Chunked, with no declared length, running past the limit.
    let mut chunked = b"POST /v1/webhooks/provider HTTP/1.1\r\nHost: c\r\n\
        Transfer-Encoding: chunked\r\nX-Signature: sha256=00\r\n\r\n"
        .to_vec();
    for _ in 0..(limit / 8192 + 2) {
        chunked.extend_from_slice(format!("{:x}\r\n", 8192).as_bytes());
        chunked.extend_from_slice(&[b'a'; 8192]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let a = send(addr, &chunked, ANSWER_WITHIN).await.unwrap();
    assert_eq!(a.status, 413, "{}", String::from_utf8_lossy(&a.body));
}

/// A head over the limit: one huge header, and too many headers.
async fn oversized_heads_are_431_or_closed(addr: std::net::SocketAddr) {
    let huge = "a".repeat(64 * 1024);
    let a = send(
        addr,
        &request("GET", b"/healthz", &[("X-Pad", huge.as_bytes())], b""),
        ANSWER_WITHIN,
    )
    .await;
    assert!(
        matches!(&a, Ok(a) if a.status == 431) || matches!(a, Err(Ended::Closed)),
        "a 64 KiB header: {a:?}"
    );
    let many: Vec<(String, Vec<u8>)> = (0..300)
        .map(|i| (format!("X-H{i}"), b"v".to_vec()))
        .collect();
    let hs: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let a = send(addr, &request("GET", b"/healthz", &hs, b""), ANSWER_WITHIN).await;
    assert!(
        matches!(&a, Ok(a) if a.status == 431) || matches!(a, Err(Ended::Closed)),
        "300 headers: {a:?}"
    );
}

/// How a slow client ended: its kind, how long the server took, and the answer.
type SlowEnd = (&'static str, (Duration, Result<raw::Answer, Ended>));

/// Slow client `i`: a head trickled, a body trickled after a prompt head,
/// or an idle connection that never sends a byte.
async fn slow_client(i: usize, addr: std::net::SocketAddr, head: String) -> SlowEnd {
    let every = Duration::from_millis(100);
    let a_minute = Duration::from_secs(60);
    match i % 3 {
        0 => (
            "head",
            trickle(addr, head.as_bytes(), every, a_minute).await,
        ),
        1 => {
            // The head at once, then the body a byte at a time.
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            use tokio::io::AsyncWriteExt;
            s.write_all(head.as_bytes()).await.unwrap();
            let t = Instant::now();
            let mut answer = Err(Ended::TimedOut);
            while t.elapsed() < a_minute {
                if s.write_all(b"{").await.is_err() {
                    answer = Err(Ended::Closed);
                    break;
                }
                match read_answer(&mut s, every).await {
                    Err(Ended::TimedOut) => continue,
                    other => {
                        answer = other;
                        break;
                    }
                }
            }
            ("body", (t.elapsed(), answer))
        }
        _ => {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let t = Instant::now();
            let answer = read_answer(&mut s, a_minute).await;
            ("idle", (t.elapsed(), answer))
        }
    }
}

/// A slow client was cut off as it should be: a JSON 408 for a body, a
/// closed connection (perhaps after a bare 408) for a head or nothing.
fn cut_off_as_expected(kind: &str, answer: &Result<raw::Answer, Ended>) {
    match (kind, answer) {
        ("body", Ok(a)) => {
            assert_eq!(a.status, 408, "{}", String::from_utf8_lossy(&a.body));
            assert_eq!(a.error_code().as_deref(), Some("timeout"));
        }
        ("head" | "idle", Err(Ended::Closed)) => {}
        ("head" | "idle", Ok(a)) if a.status == 408 => {}
        other => panic!("unexpected end of a slow client: {other:?}"),
    }
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_do_not_hold_the_server() {
    let mut live = Live::start("slow").await;
    let addr = live.server.addr();
    let before = db_state(&live.store).await;
    // Bounded: the server's cut plus slack for a loaded machine.
    let cut_within = Duration::from_millis(CUT_MS) + Duration::from_secs(4);

    // 50 slow clients at once.
    let head = format!(
        "POST /v1/actions HTTP/1.1\r\nHost: c\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 500\r\n\r\n"
    );
    let mut slow = tokio::task::JoinSet::new();
    for i in 0..50 {
        slow.spawn(slow_client(i, addr, head.clone()));
    }
    // Meanwhile, ordinary requests are answered promptly.
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        assert_eq!(live.client.get(1).await, Ok(None));
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < Duration::from_secs(2),
        "an ordinary request took {slowest:?} beside slow clients"
    );

    let mut by_kind = std::collections::BTreeMap::<&str, (usize, Duration)>::new();
    while let Some(r) = slow.join_next().await {
        let (kind, (took, answer)) = r.unwrap();
        assert!(took < cut_within, "{kind}: held the server for {took:?}");
        cut_off_as_expected(kind, &answer);
        let e = by_kind.entry(kind).or_default();
        e.0 += 1;
        e.1 = e.1.max(took);
    }
    eprintln!(
        "slow clients (cut at {CUT_MS} ms): {by_kind:?}; slowest ordinary request {slowest:?}"
    );
    assert_eq!(db_state(&live.store).await, before);
    live.assert_healthy().await;
}

#[tokio::test]
async fn unknown_stores_keys_routes_and_ids_get_a_json_4xx() {
    let mut live = Live::start("unknown").await;
    let (_, key) = live.accepted_action().await;
    let before = db_state(&live.store).await;
    unknown_routes_and_ids_are_json_4xx(&live).await;
    bad_stores_and_bodies_are_400(&live).await;
    signed_webhooks_for_nothing_are_refused(&live, &key).await;
    assert_eq!(db_state(&live.store).await, before);
    live.assert_healthy().await;
}

/// Ids that are not there or cannot be, routes that do not exist, and a
/// method a route does not take.
async fn unknown_routes_and_ids_are_json_4xx(live: &Live) {
    let get = |path: &str| {
        let r = live.http.get(live.url(path)).bearer_auth(TOKEN).send();
        async move {
            let r = r.await.unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    for (path, want, code) in [
        ("/v1/actions/424242", 404, "not_found"),
        ("/v1/actions/-1", 404, "not_found"),
        ("/v1/actions/0", 404, "not_found"),
        ("/v1/actions/99999999999999999999", 400, "bad_id"),
        ("/v1/actions/1.5", 400, "bad_id"),
        ("/v1/actions/%00", 400, "bad_id"),
        ("/v1/stores/nope", 404, "not_found"),
        ("/v1/stores/nope/extra", 404, "no_route"),
        ("/v1/stores/%FF", 400, "bad_store"),
        ("/v1/providers/nope", 404, "not_found"),
        ("/v1/providers/a%2Fb", 400, "bad_provider"),
        ("/v1/actions/1/extra", 404, "no_route"),
        ("/admin", 404, "no_route"),
    ] {
        let (status, v) = get(path).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (want, Some(code)),
            "{path}: {v}"
        );
    }
    let r = live
        .http
        .delete(live.url("/v1/actions"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "method_not_allowed"
    );
}

/// Stores that cannot exist, and bodies the database could not hold: each
/// refused with its reason and the field at fault.
async fn bad_stores_and_bodies_are_400(live: &Live) {
    let base = EnqueueRequest {
        store: "s2".into(),
        to: "+15551234567".into(),
        body: "hi".into(),
        key: None,
        not_before: None,
        expires_at: None,
    };
    let store = |v: &str| EnqueueRequest {
        store: v.to_string(),
        ..base.clone()
    };
    let s65 = "s".repeat(65);
    for (name, req, code, field) in [
        ("a space", store("a b"), "bad_store", "store"),
        ("a path", store("../etc"), "bad_store", "store"),
        ("NUL", store("s\u{0}1"), "bad_store", "store"),
        ("65 characters", store(&s65), "bad_store", "store"),
        ("not ASCII", store("ストア"), "bad_store", "store"),
        ("empty", store(""), "bad_store", "store"),
        (
            "NUL in the text",
            EnqueueRequest {
                body: "a\u{0}b".into(),
                ..base.clone()
            },
            "bad_body",
            "body",
        ),
        (
            "a control character in the key",
            EnqueueRequest {
                key: Some("k\u{7}".into()),
                ..base.clone()
            },
            "bad_key",
            "key",
        ),
    ] {
        let e = live.client.enqueue(&req).await.unwrap_err();
        assert!(
            matches!(&e, ClientError::Refused { status: 400, reason, field: Some(f), index: None, .. }
                if reason == code && f == field),
            "{name}: {e:?}"
        );
    }
    // Malformed on purpose: JSON the typed request cannot express.
    for (name, raw) in [
        (
            "a number",
            &br#"{"store":7,"to":"+15551234567","body":"hi"}"#[..],
        ),
        (
            "a lone surrogate",
            br#"{"store":"s2","to":"+15551234567","body":"\ud800"}"#,
        ),
    ] {
        let (status, v) = live.enqueue_raw(raw.to_vec()).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some("bad_json")),
            "{name}: {v}"
        );
    }
}

/// A signed webhook for a key no intent has: 404, and no event id kept;
/// one with an empty event id or an unknown status: 400.
async fn signed_webhooks_for_nothing_are_refused(live: &Live, key: &str) {
    for (name, ev) in [
        ("unknown key", event("evt_u", "courier-0000", "delivered")),
        ("empty event id", event("", key, "delivered")),
        ("unknown status", event("evt_s", key, "teleported")),
    ] {
        let r = live
            .http
            .post(live.url("/v1/webhooks/provider"))
            .header(
                "x-signature",
                signature::sign(SECRET.as_bytes(), ev.as_bytes()),
            )
            .body(ev.clone())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        let want = if name == "unknown key" { 404 } else { 400 };
        assert_eq!(status, want, "{name}: {v}");
        assert!(v["error"].is_string(), "{name}: {v}");
    }
}

#[tokio::test]
async fn malformed_utf8_anywhere_is_refused() {
    let mut live = Live::start("utf").await;
    let addr = live.server.addr();
    let (_, key) = live.accepted_action().await;
    let before = db_state(&live.store).await;
    let cases = malformed_requests(&key);
    for (name, bytes, want) in cases {
        let a = send(addr, &bytes, ANSWER_WITHIN)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(
            a.status,
            want,
            "{name}: {}",
            String::from_utf8_lossy(&a.body)
        );
        assert!(
            a.error_code().is_some(),
            "{name}: no JSON error: {}",
            String::from_utf8_lossy(&a.body)
        );
    }
    // Raw bytes in the request line never reach courier: hyper refuses them.
    let a = send(
        addr,
        b"GET /v1/actions/\xff HTTP/1.1\r\nHost: c\r\n\r\n",
        ANSWER_WITHIN,
    )
    .await;
    assert!(
        matches!(&a, Ok(a) if a.status == 400) || matches!(a, Err(Ended::Closed)),
        "a raw 0xff in the path: {a:?}"
    );
    assert_eq!(db_state(&live.store).await, before);
    live.assert_healthy().await;
}

/// Malformed UTF-8 in each place a request carries text, with the status
/// each must get: (where, the raw request, status).
fn malformed_requests(key: &str) -> Vec<(&'static str, Vec<u8>, u16)> {
    let auth = format!("Bearer {TOKEN}");
    let auth = auth.as_bytes();
    let bad_json = b"{\"store\":\"s\xff1\",\"to\":\"+15551234567\",\"body\":\"hi\"}";
    let signed_bad = {
        let mut e = event("evt_x", key, "delivered").into_bytes();
        e.insert(10, 0xc3);
        e
    };
    let sig = signature::sign(SECRET.as_bytes(), &signed_bad);
    vec![
        (
            "in the JSON of an enqueue",
            request("POST", b"/v1/actions", &[("Authorization", auth)], bad_json),
            400,
        ),
        (
            "a whole body of garbage",
            request(
                "POST",
                b"/v1/actions",
                &[("Authorization", auth)],
                &[0xff, 0xfe, 0xfd],
            ),
            400,
        ),
        (
            "in a percent-encoded id",
            request(
                "GET",
                b"/v1/actions/%FF%FE",
                &[("Authorization", auth)],
                b"",
            ),
            400,
        ),
        (
            "in the bearer token",
            request(
                "GET",
                b"/v1/actions/1",
                &[("Authorization", b"Bearer \xff\xfe")],
                b"",
            ),
            401,
        ),
        (
            "in a correctly signed webhook",
            request(
                "POST",
                b"/v1/webhooks/provider",
                &[("X-Signature", sig.as_bytes())],
                &signed_bad,
            ),
            400,
        ),
    ]
}

#[tokio::test]
async fn wrong_bearer_tokens_are_refused_everywhere() {
    let mut live = Live::start("token").await;
    let before = db_state(&live.store).await;
    let well_formed = json!({"store": "s1", "to": "+15551234567", "body": "hi"});
    // Each wrong credential and the code it is refused with: a header that
    // is not `Bearer <token>` is `bad_authorization`, a token that matches
    // nothing (or none) `unauthorized`.
    let variants: Vec<(Option<String>, &str)> = vec![
        (None, "unauthorized"),
        (Some(String::new()), "bad_authorization"),
        (Some("Bearer".into()), "bad_authorization"),
        (Some("Bearer ".into()), "bad_authorization"),
        (
            Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
            "unauthorized",
        ),
        (Some(format!("Bearer {TOKEN}x")), "unauthorized"),
        (Some(format!("Bearer  {TOKEN}")), "bad_authorization"),
        (Some(format!("Basic {TOKEN}")), "bad_authorization"),
        (Some(TOKEN.to_string()), "bad_authorization"),
        (Some("Bearer courier_1_00ff".into()), "unauthorized"),
    ];
    for path in [
        "/v1/actions",
        "/v1/actions/1",
        "/v1/stores",
        "/v1/stores/s1",
        "/v1/providers/contract",
        "/v1/ops/snapshot",
        "/metrics",
    ] {
        for (v, code) in &variants {
            let mut req = if path == "/v1/actions" {
                live.http.post(live.url(path)).json(&well_formed)
            } else {
                live.http.get(live.url(path))
            };
            if let Some(v) = v {
                req = req.header("authorization", v);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status().as_u16(), 401, "{path} with {v:?}");
            assert_eq!(
                r.json::<Value>().await.unwrap()["error"],
                *code,
                "{path} with {v:?}"
            );
        }
    }
    assert_eq!(db_state(&live.store).await, before);
    // The right token works, and the pages themselves need none.
    let made = live.client.enqueue(&good("k1")).await.unwrap();
    assert!(matches!(made, Enqueued::Created(_)), "{made:?}");
    for path in [
        "/",
        "/dashboard",
        "/report",
        "/openapi.json",
        "/dashboard/app.js",
    ] {
        let r = live.http.get(live.url(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    live.assert_healthy().await;
}

/// Settings the server must refuse (out of their bounds, of the wrong type,
/// unknown, malformed, for a name no store can have), through the typed
/// client, by hand and through `courier store set`: each refused with the
/// field at fault, and nothing changed, neither the settings nor a row.
#[tokio::test]
async fn hostile_store_settings_are_refused_with_their_field_and_change_nothing() {
    let mut live = Live::start("settings").await;
    let set = StoreSettings {
        rate_per_s: Some(5.0),
        burst: Some(10),
        in_flight_max: Some(2),
    };
    let was = live.client.store_settings_put("s1", &set).await.unwrap();
    let before = db_state(&live.store).await;
    // Names no store can have, through the typed client (`..` it refuses
    // itself: a URL cannot carry it).
    let s65 = "s".repeat(65);
    for (name, store) in [
        ("a space", "a b"),
        ("a path", "../etc"),
        ("NUL", "s\u{0}1"),
        ("65 characters", s65.as_str()),
        ("not ASCII", "ストア"),
        ("dots alone", ".."),
    ] {
        let e = live
            .client
            .store_settings_put(store, &set)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ClientError::Refused { status: 400, reason, field: Some(f), .. }
                if reason == "bad_store" && f == "store"),
            "{name}: {e:?}"
        );
    }
    // A value the client cannot send as JSON (serde_json writes an infinite
    // number as null): refused by the client, which sends nothing.
    let infinite = StoreSettings {
        rate_per_s: Some(f64::INFINITY),
        ..set
    };
    let e = live
        .client
        .store_settings_put("s1", &infinite)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused { status: 400, reason, field: Some(f), .. }
            if reason == "bad_settings" && f == "rate_per_s"),
        "{e:?}"
    );
    // By hand: values out of their bounds, and JSON the typed settings
    // cannot express.
    for (name, raw, code, field) in [
        (
            "a negative rate",
            &br#"{"rate_per_s": -1}"#[..],
            "bad_settings",
            Some("rate_per_s"),
        ),
        (
            "a rate over its bound",
            br#"{"rate_per_s": 1e9}"#,
            "bad_settings",
            Some("rate_per_s"),
        ),
        (
            "a zero burst",
            br#"{"rate_per_s": 5, "burst": 0}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "a burst without a rate",
            br#"{"burst": 3}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "a cap over its bound",
            br#"{"in_flight_max": 10001}"#,
            "bad_settings",
            Some("in_flight_max"),
        ),
        ("NaN", br#"{"rate_per_s": NaN}"#, "bad_json", None),
        (
            "a rate past f64",
            br#"{"rate_per_s": 1e999}"#,
            "bad_json",
            None,
        ),
        (
            "a boolean burst",
            br#"{"rate_per_s": 5, "burst": true}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "a burst past u32",
            br#"{"rate_per_s": 5, "burst": 4294967296}"#,
            "bad_settings",
            Some("burst"),
        ),
        (
            "an unknown field",
            br#"{"rate_per_s": 5, "priority": 1}"#,
            "bad_settings",
            Some("priority"),
        ),
        (
            "a lone surrogate field",
            br#"{"\ud800": 1}"#,
            "bad_json",
            None,
        ),
        ("an array", b"[5, 10, 2]", "bad_json", None),
        ("not UTF-8", b"{\"rate_per_s\": \"\xff\"}", "bad_json", None),
        ("nested deep", &[b'['; 4096][..], "bad_json", None),
    ] {
        let r = live
            .http
            .put(live.url("/v1/stores/s1"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(raw.to_vec())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (status, v["error"].as_str(), v["field"].as_str()),
            (400, Some(code), field),
            "{name}: {v}"
        );
    }
    // The CLI refuses what the API refuses, before it writes anything.
    let url = live.db_url.clone();
    for (name, flags) in [
        ("a negative rate", vec!["--rate-per-s", "-1"]),
        ("a zero burst", vec!["--rate-per-s", "5", "--burst", "0"]),
        (
            "a negative burst",
            vec!["--rate-per-s", "5", "--burst", "-3"],
        ),
        ("a burst without a rate", vec!["--burst", "3"]),
        ("a rate that is not a number", vec!["--rate-per-s", "fast"]),
        ("an unknown flag", vec!["--rate", "5"]),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_courier"))
            .args(["store", "set", "s1", "--database-url", &url])
            .args(&flags)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {out:?}");
        assert!(!out.stderr.is_empty(), "{name}: no reason given");
    }
    assert_eq!(db_state(&live.store).await, before);
    let now = live.client.store_settings_get("s1").await.unwrap().unwrap();
    assert_eq!(now.settings, was.settings);

    // What the CLI sets, the API shows, and the other way round.
    let courier = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_courier"))
            .args(args)
            .args(["--database-url", &url])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = courier(&["store", "set", "s1", "--rate-per-s", "2", "--burst", "4"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("2 a second, burst 4"), "{text}");
    let now = live.client.store_settings_get("s1").await.unwrap().unwrap();
    assert_eq!(
        now.settings,
        StoreSettings {
            rate_per_s: Some(2.0),
            burst: Some(4),
            in_flight_max: None
        }
    );
    let (code, text) = courier(&["store", "show", "s1", "--json"]);
    assert_eq!(code, Some(0), "{text}");
    let shown: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(shown["settings"]["burst"], 4, "{text}");
    let (code, text) = courier(&["store", "list"]);
    assert_eq!(code, Some(0));
    assert!(text.lines().any(|l| l.starts_with("s1 ")), "{text}");
    assert_eq!(courier(&["store", "show", "never-seen"]).0, Some(2));
    let (code, text) = courier(&["providers", "limit", "contract", "--rate-per-s", "9"]);
    assert_eq!(code, Some(0), "{text}");
    let gate = live
        .client
        .provider_settings_get("contract")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (gate.settings.rate_per_s, gate.settings.burst),
        (Some(9.0), Some(9))
    );
    let (code, text) = courier(&["providers", "gate", "contract"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("9 a second, burst 9") && text.contains("paused      no"),
        "{text}"
    );
    assert_eq!(courier(&["providers", "gate", "nope"]).0, Some(2));
    let events: Vec<String> = fixtures::column(
        &live.store,
        "SELECT detail FROM events WHERE kind IN ('store_settings', 'provider_settings') ORDER BY id",
    )
    .await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events[1].contains("by=cli:") && events[2].contains("by=cli:"),
        "{events:?}"
    );
    live.assert_healthy().await;
}
