//! Every row of `docs/provider-api.md`'s tables, driven over real HTTP
//! against the fake provider, with its log checked after each case.

mod common;

use common::*;
use courier_core::Status;
use courier_fake::{Latency, MsRange};
use courier_provider::wire::{LogEntry, LogOp, LookupResult, MessageView, SendResult};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn auth() -> String {
    format!("Bearer {API_KEY}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_send_is_201_and_a_repeat_replays_it_byte_for_byte() {
    let s = Scratch::new();
    let p = start(s.config()).await;
    let api = Api::new(&p);

    let first = api.send("k-1", "hello", None).await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed);
    let view: MessageView = serde_json::from_slice(&first.body).unwrap();
    assert!(view.id.starts_with("msg_"), "{view:?}");
    assert_eq!(view.key, "k-1");
    assert_eq!(view.status, Status::Accepted);

    // The quoted and the bare header forms are the same key.
    let bare = api
        .send_raw(Some(&auth()), Some(b"k-1"), body_json(PHONE, "hello", None))
        .await;
    let quoted = api.send("k-1", "hello", None).await;
    for repeat in [&bare, &quoted] {
        assert_eq!(repeat.status, 201);
        assert!(
            repeat.replayed,
            "a repeat carries Idempotent-Replayed: true"
        );
        assert_eq!(repeat.body, first.body, "the first answer, byte for byte");
    }
    // Same content with other JSON spacing and field order is still a repeat.
    let reordered = format!(r#"{{ "body" : "hello", "to" : "{PHONE}" }}"#);
    let again = api
        .send_raw(Some(&auth()), Some(b"\"k-1\""), reordered)
        .await;
    assert_eq!((again.status, again.replayed), (201, true));
    assert_eq!(again.body, first.body);

    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(sends_with(&log, "k-1", SendResult::Created), 1);
    assert_eq!(sends_with(&log, "k-1", SendResult::Replayed), 3);
    assert!(log.iter().all(|e| match &e.op {
        LogOp::Send {
            result: SendResult::Replayed,
            message_id,
            ..
        } => message_id.as_deref() == Some(&view.id),
        _ => true,
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_another_body_is_422_and_makes_nothing() {
    let s = Scratch::new();
    let p = start(s.config()).await;
    let api = Api::new(&p);
    assert_eq!(api.send("k", "one", None).await.status, 201);
    let other_text = api.send("k", "two", None).await;
    assert_eq!(other_text.status, 422);
    assert_eq!(other_text.error(), "idempotency_key_reused");
    assert!(!other_text.replayed);
    let other_phone = api
        .send_raw(
            Some(&auth()),
            Some(b"k"),
            body_json("+15550000000", "one", None),
        )
        .await;
    assert_eq!(other_phone.status, 422);
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(sends_with(&log, "k", SendResult::Created), 1);
    assert_eq!(sends_with(&log, "k", SendResult::Reused), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_while_the_first_is_in_progress_is_409() {
    let s = Scratch::new();
    let mut cfg = s.config();
    // Each request takes a second, so the two below overlap whichever
    // reaches the provider first.
    cfg.latency = Latency::Fixed { ms: 1_000 };
    let p = start(cfg).await;
    let api = Api::new(&p);
    let (a, b) = tokio::join!(api.send("k", "hi", None), api.send("k", "hi", None));
    let mut codes = [a.status, b.status];
    codes.sort_unstable();
    assert_eq!(
        codes,
        [201, 409],
        "one creates, the other is told it is in progress"
    );
    let conflict = if a.status == 409 { &a } else { &b };
    assert_eq!(conflict.error(), "request_in_progress");
    // Once the first is done, a repeat is a replay.
    let later = api.send("k", "hi", None).await;
    assert_eq!((later.status, later.replayed), (201, true));
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(sends_with(&log, "k", SendResult::Created), 1);
    assert_eq!(sends_with(&log, "k", SendResult::Conflict), 1);
    assert_eq!(sends_with(&log, "k", SendResult::Replayed), 1);
}

/// Sends a chunked body (no Content-Length) over a raw socket; returns the
/// status code and how long the answer took.
async fn chunked_send(addr: std::net::SocketAddr, total_bytes: usize) -> (u16, Duration) {
    let t = Instant::now();
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {API_KEY}\r\nidempotency-key: chunked\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < total_bytes {
        let frame = format!("{:x}\r\n", chunk.len());
        // The provider may answer and close before the whole body is sent.
        if sock.write_all(frame.as_bytes()).await.is_err()
            || sock.write_all(&chunk).await.is_err()
            || sock.write_all(b"\r\n").await.is_err()
        {
            break;
        }
        sent += chunk.len();
    }
    let _ = sock.write_all(b"0\r\n\r\n").await;
    let mut answer = vec![0u8; 1024];
    let n = sock.read(&mut answer).await.unwrap();
    let line = String::from_utf8_lossy(&answer[..n]).to_string();
    let code = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    (code, t.elapsed())
}

/// A refused send: (what, Authorization, Idempotency-Key, body, expected status).
type Case = (&'static str, Option<String>, Option<Vec<u8>>, String, u16);

/// A send with good credentials and this key, body and expected status.
fn authorised(what: &'static str, key: &[u8], body: String, code: u16) -> Case {
    (what, Some(auth()), Some(key.to_vec()), body, code)
}

/// Every way a send can be refused; none may leave an effect.
fn bad_sends() -> Vec<Case> {
    let good = || body_json(PHONE, "hi", None);
    let one_mib = format!(r#"{{"to":"{PHONE}","body":"{}"}}"#, "x".repeat(1 << 20));
    vec![
        ("no auth", None, Some(b"k-noauth".to_vec()), good(), 401),
        (
            "wrong key",
            Some("Bearer nope".into()),
            Some(b"k-wrong".to_vec()),
            good(),
            401,
        ),
        (
            "wrong scheme",
            Some(format!("Basic {API_KEY}")),
            Some(b"k-basic".to_vec()),
            good(),
            401,
        ),
        ("no idempotency key", Some(auth()), None, good(), 400),
        authorised("empty key", b"\"\"", good(), 400),
        authorised("256-char key", "a".repeat(256).as_bytes(), good(), 400),
        authorised("non-ASCII key", "ключ".as_bytes(), good(), 400),
        authorised("bad JSON", b"k-json", "{\"to\":".into(), 400),
        authorised(
            "unknown field",
            b"k-field",
            format!(r#"{{"to":"{PHONE}","body":"x","from":"me"}}"#),
            400,
        ),
        authorised(
            "bad phone",
            b"k-phone",
            body_json("555-1234", "hi", None),
            400,
        ),
        authorised("empty text", b"k-empty", body_json(PHONE, "", None), 400),
        authorised(
            "1601 chars",
            b"k-long",
            body_json(PHONE, &"é".repeat(1601), None),
            400,
        ),
        authorised(
            "bad callback",
            b"k-cb",
            body_json(PHONE, "hi", Some("ftp://x")),
            400,
        ),
        authorised("1 MiB body", b"k-big", one_mib, 413),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_4xx_and_leave_no_effect() {
    let s = Scratch::new();
    let p = start(s.config()).await;
    let api = Api::new(&p);
    let cases = bad_sends();
    let requests = cases.len();
    for (what, auth_header, key, body, code) in cases {
        let t = Instant::now();
        let a = api
            .send_raw(auth_header.as_deref(), key.as_deref(), body)
            .await;
        assert_eq!(a.status, code, "{what}: {:?}", a.body);
        let text = a.error();
        if code == 400 {
            assert!(text.len() > 10, "{what}: a useful message, got {text:?}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what} took {:?}",
            t.elapsed()
        );
    }
    // 1600 characters (not bytes) is the limit: accepted.
    let at_limit = api
        .send_raw(
            Some(&auth()),
            Some(b"k-1600"),
            body_json(PHONE, &"é".repeat(1600), None),
        )
        .await;
    assert_eq!(at_limit.status, 201);
    // A streamed 1 MiB body with no Content-Length is cut off at the limit.
    let (code, took) = chunked_send(p.addr, 1 << 20).await;
    assert_eq!(code, 413);
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Lookups need auth too, and refuse keys that cannot exist.
    assert_eq!(api.lookup_raw(None, "k-1600").await.status, 401);
    assert_eq!(
        api.lookup_raw(Some("Bearer nope"), "k-1600").await.status,
        401
    );
    assert_eq!(api.lookup(&"a".repeat(256)).await.status, 400);
    for key in ["k-noauth", "k-json", "k-phone", "k-big", "chunked"] {
        assert_eq!(api.lookup(key).await.status, 404, "{key} must not exist");
    }
    p.shutdown().await.unwrap();
    // Every refused send and the chunked one are logged as rejected.
    only_the_good_send_created(&read_log(&s.log), requests + 1);
}

/// The log holds `rejected` refused sends, and the one good send's message
/// is the only one created, with the only status lines.
fn only_the_good_send_created(log: &[LogEntry], rejected: usize) {
    let logged = count(log, |op| {
        matches!(
            op,
            LogOp::Send {
                result: SendResult::Rejected,
                ..
            }
        )
    });
    assert_eq!(logged, rejected, "every refused send is logged as rejected");
    let created: Vec<_> = log
        .iter()
        .filter_map(|e| match &e.op {
            LogOp::Send {
                key,
                result: SendResult::Created,
                ..
            } => key.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(
        created,
        vec!["k-1600".to_string()],
        "no refused send created anything"
    );
    let statuses_for_others = count(
        log,
        |op| matches!(op, LogOp::Status { key, .. } if key != "k-1600"),
    );
    assert_eq!(statuses_for_others, 0);
    // The unauthorised send's key, when usable, is on its line.
    assert!(log.iter().any(|e| matches!(&e.op,
        LogOp::Send { key: Some(k), result: SendResult::Rejected, .. } if k == "k-noauth")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_find_known_keys_and_404_unknown_ones() {
    let s = Scratch::new();
    let p = start(s.config()).await;
    let api = Api::new(&p);
    let created: MessageView =
        serde_json::from_slice(&api.send("known/key 1", "hi", None).await.body).unwrap();
    let found = api.lookup("known%2Fkey%201").await;
    assert_eq!(found.status, 200);
    let view: MessageView = serde_json::from_slice(&found.body).unwrap();
    assert_eq!(
        (view.id.as_str(), view.key.as_str()),
        (created.id.as_str(), "known/key 1")
    );
    let updated = view.updated_at.expect("updated_at");
    chrono::DateTime::parse_from_rfc3339(&updated).expect("updated_at is RFC 3339");
    let missing = api.lookup("never-sent").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error(), "not_found");
    // The status moves on to a final one, and the lookup says so.
    eventually("a final status", || {
        read_log_so_far(&s.log)
            .iter()
            .any(|e| matches!(e.op, LogOp::Status { is_final: true, .. }))
    })
    .await;
    let done: MessageView =
        serde_json::from_slice(&api.lookup("known%2Fkey%201").await.body).unwrap();
    assert_eq!(done.status, Status::Delivered);
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    let lookups: Vec<_> = log
        .iter()
        .filter_map(|e| match &e.op {
            LogOp::Lookup {
                key,
                result,
                status,
            } => Some((key.clone(), *result, *status)),
            _ => None,
        })
        .collect();
    assert_eq!(
        lookups[0],
        ("known/key 1".into(), LookupResult::Found, Some(view.status))
    );
    assert_eq!(
        lookups[1],
        ("never-sent".into(), LookupResult::NotFound, None)
    );
    assert_eq!(
        lookups[2],
        (
            "known/key 1".into(),
            LookupResult::Found,
            Some(Status::Delivered)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lookup_lags_behind_a_send() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.lookup_lag_ms = 400;
    let p = start(cfg).await;
    let api = Api::new(&p);
    let sent_at = Instant::now();
    assert_eq!(api.send("lagged", "hi", None).await.status, 201);
    let early = api.lookup("lagged").await;
    assert_eq!(
        early.status, 404,
        "inside the lag the key is not visible yet"
    );
    assert_eq!(early.error(), "not_found");
    // Poll until visible; it must not be visible before the lag has passed.
    let deadline = Instant::now() + WAIT;
    loop {
        let a = api.lookup("lagged").await;
        if a.status == 200 {
            break;
        }
        assert_eq!(a.status, 404);
        assert!(Instant::now() < deadline, "never visible");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        sent_at.elapsed() >= Duration::from_millis(400),
        "{:?}",
        sent_at.elapsed()
    );
    // A repeat inside the lag is still a replay: the key is the guarantee.
    assert!(api.send("lagged", "hi", None).await.replayed);
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_key_makes_a_new_message() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.key_retention_ms = 300;
    let p = start(cfg).await;
    let api = Api::new(&p);
    let first: MessageView =
        serde_json::from_slice(&api.send("short", "hi", None).await.body).unwrap();
    let sent_at = Instant::now();
    assert!(api.send("short", "hi", None).await.replayed);
    let deadline = Instant::now() + WAIT;
    while api.lookup("short").await.status == 200 {
        assert!(Instant::now() < deadline, "the key is never forgotten");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        sent_at.elapsed() >= Duration::from_millis(250),
        "forgotten too early"
    );
    let again = api.send("short", "hi", None).await;
    assert_eq!((again.status, again.replayed), (201, false));
    let second: MessageView = serde_json::from_slice(&again.body).unwrap();
    assert_ne!(second.id, first.id, "a forgotten key is a new message");
    p.shutdown().await.unwrap();
    assert_eq!(
        sends_with(&read_log(&s.log), "short", SendResult::Created),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_move_forward_to_exactly_one_final_each_logged_in_order() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.faults.late_failed = 0.3;
    cfg.sent_after_ms = MsRange::new(0, 30);
    cfg.delivered_after_ms = MsRange::new(0, 30);
    cfg.failed_after_ms = MsRange::new(0, 30);
    let p = start(cfg).await;
    let api = Api::new(&p);
    let n = 200;
    let mut sends = Vec::new();
    for i in 0..n {
        let api = api.clone();
        sends.push(tokio::spawn(async move {
            api.send(&format!("m-{i}"), "hi", None).await.status
        }));
    }
    for s in sends {
        assert_eq!(s.await.unwrap(), 201);
    }
    eventually("every message final", || {
        count(&read_log_so_far(&s.log), |op| {
            matches!(op, LogOp::Status { is_final: true, .. })
        }) == n
    })
    .await;
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    let mut finals = std::collections::HashMap::new();
    let mut sent = std::collections::HashSet::new();
    for e in &log {
        if let LogOp::Status {
            key,
            status,
            is_final,
            ..
        } = &e.op
        {
            assert_eq!(*is_final, status.is_final());
            match status {
                Status::Sent => assert!(sent.insert(key.clone()), "{key} sent twice"),
                Status::Delivered | Status::Failed => {
                    assert!(sent.contains(key), "{key}: final before sent");
                    assert!(
                        finals.insert(key.clone(), *status).is_none(),
                        "{key}: two finals"
                    );
                }
                other => panic!("unexpected status line {other}"),
            }
        }
    }
    assert_eq!(finals.len(), n);
    let failed = finals.values().filter(|s| **s == Status::Failed).count();
    assert!(
        failed > 0 && failed < n,
        "late failures happen, not to all: {failed}"
    );
}
