//! The fake's own rate limit (`--rate-limit`, `--rate-burst`) over real
//! HTTP: a send over it is `429` with `Retry-After`, in each dialect's own
//! error shape; it creates nothing, is logged `rejected` with the fault
//! `rate_limited`, and leaves its key free for a later send; lookups are
//! not metered; and a refused send uses up no seeded draw.
//!
//! Where a test waits out a `Retry-After` (1 s), it sleeps for real: the
//! provider meters with its own clock, and a client that waits that long,
//! and no longer, succeeding is the behaviour under test.

mod common;

use common::*;
use courier_fake::dialect::Dialect;
use courier_fake::{FakeConfig, Latency};
use courier_provider::wire::SendResult;
use courier_provider::SendOutcome;
use courier_providers::{infobip, telnyx, twilio};
use std::path::Path;
use std::time::{Duration, Instant};

/// The test defaults under a rate limit of `rate` with a bucket of `burst`.
fn limited(s: &Scratch, rate: &str, burst: u32) -> FakeConfig {
    let mut cfg = s.config();
    cfg.rate_limit = Some(rate.parse().expect("a rate"));
    cfg.rate_burst = Some(burst);
    cfg
}

/// Waits out a `Retry-After`, as a client honouring it does.
async fn honour(retry_after: Option<&str>) {
    let s: u64 = retry_after
        .expect("a 429 carries Retry-After")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!(s >= 1);
    tokio::time::sleep(Duration::from_secs(s)).await;
}

/// `(result, fault)` of each `send` line of `key`, in log order.
fn sends_of(log: &Path, key: &str) -> Vec<(String, Option<String>)> {
    read_log_raw(log)
        .into_iter()
        .filter(|l| l["op"] == "send" && l["key"] == key)
        .map(|l| {
            let result = l["result"].as_str().expect("a result").to_string();
            (result, l["fault"].as_str().map(str::to_string))
        })
        .collect()
}

fn rate_limited_line() -> (String, Option<String>) {
    ("rejected".to_string(), Some("rate_limited".to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_the_limit_is_429_with_retry_after_creates_nothing_and_the_key_succeeds_later()
{
    let s = Scratch::new();
    // A token a second, three at once: the fourth send finds none.
    let p = start(limited(&s, "1/s", 3)).await;
    let api = Api::new(&p);
    for key in ["k-1", "k-2", "k-3"] {
        assert_eq!(api.send(key, "hello", None).await.status, 201, "{key}");
    }
    let refused = api.send("k-4", "hello", None).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.error(), "rate_limited");
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    let again = api.send("k-4", "hello", None).await;
    assert_eq!(
        (again.status, again.retry_after.as_deref()),
        (429, Some("1"))
    );
    // A repeat of a created key is a send too: metered, not replayed.
    let repeat = api.send("k-1", "hello", None).await;
    assert_eq!((repeat.status, repeat.replayed), (429, false));

    // Lookups are not metered: with the bucket empty, the client can still
    // find out that its refused send made nothing.
    for _ in 0..10 {
        let lookup = api.lookup("k-4").await;
        assert_eq!((lookup.status, lookup.error()), (404, "not_found".into()));
        assert_eq!(api.lookup("k-1").await.status, 200);
    }
    assert_eq!(
        sends_of(&s.log, "k-4"),
        [rate_limited_line(), rate_limited_line()]
    );

    honour(refused.retry_after.as_deref()).await;
    let later = api.send("k-4", "hello", None).await;
    assert_eq!((later.status, later.replayed), (201, false));

    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    for key in ["k-1", "k-2", "k-3", "k-4"] {
        assert_eq!(sends_with(&log, key, SendResult::Created), 1, "{key}");
    }
    assert_eq!(
        sends_of(&s.log, "k-4"),
        [
            rate_limited_line(),
            rate_limited_line(),
            ("created".to_string(), None)
        ]
    );
    assert_eq!(
        sends_of(&s.log, "k-1"),
        [("created".to_string(), None), rate_limited_line()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_send_draws_no_fault_and_waits_no_latency() {
    let s = Scratch::new();
    let mut cfg = limited(&s, "1/s", 1);
    // Every first send of a key waits 1 s, then loses its answer.
    cfg.faults.timeout = 1.0;
    cfg.latency = Latency::Fixed { ms: 1_000 };
    let p = start(cfg).await;
    let api = Api::new(&p);
    let timed = |key: &'static str| {
        let api = api.clone();
        async move {
            let t = Instant::now();
            (key, api.send(key, "hello", None).await, t.elapsed())
        }
    };
    // One token for two concurrent sends: one is admitted, one refused.
    let (a, b) = tokio::join!(timed("k-a"), timed("k-b"));
    let (admitted, refused) = if a.1.status == 429 { (b, a) } else { (a, b) };
    assert_eq!(admitted.1.status, 504, "the admitted send times out");
    assert_eq!(refused.1.status, 429);
    assert!(
        refused.2 < Duration::from_millis(1_000),
        "a 429 is answered without the send's latency: {:?}",
        refused.2
    );
    let (refused_key, refused_answer) = (refused.0, refused.1);
    assert_eq!(sends_of(&s.log, refused_key), [rate_limited_line()]);

    // The refused key is still new to the provider: its first admitted send
    // meets the time-out fault that every first send meets.
    honour(refused_answer.retry_after.as_deref()).await;
    assert_eq!(api.send(refused_key, "hello", None).await.status, 504);
    p.shutdown().await.unwrap();
    let lines = sends_of(&s.log, refused_key);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], rate_limited_line());
    let fault = lines[1].1.as_deref().unwrap_or_default();
    assert!(fault.starts_with("timeout_"), "{lines:?}");
}

/// The send lines that decide a message's fate (`created` and `faulted`),
/// with what was drawn for them: `(result, ordinal, plan, fault)`.
fn fates(log: &Path) -> Vec<serde_json::Value> {
    read_log_raw(log)
        .into_iter()
        .filter(|l| l["op"] == "send" && (l["result"] == "created" || l["result"] == "faulted"))
        .map(|l| serde_json::json!([l["result"], l["ordinal"], l["plan"], l["fault"]]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ignore_key_mode_a_rate_limited_send_takes_no_ordinal_so_seeded_fates_are_unchanged() {
    let settings = |cfg: &mut FakeConfig| {
        cfg.ignore_key = true;
        cfg.seed = 7;
        cfg.faults.timeout = 0.5;
    };
    // Three sends of one key without a limit...
    let plain = Scratch::new();
    let mut cfg = plain.config();
    settings(&mut cfg);
    let p = start(cfg).await;
    let api = Api::new(&p);
    for _ in 0..3 {
        api.send("k", "hello", None).await;
    }
    p.shutdown().await.unwrap();

    // ...and with one, a refused send between each two admitted ones.
    let metered = Scratch::new();
    let mut cfg = limited(&metered, "1/s", 1);
    settings(&mut cfg);
    let p = start(cfg).await;
    let api = Api::new(&p);
    for i in 0..3 {
        assert_ne!(api.send("k", "hello", None).await.status, 429, "send {i}");
        if i < 2 {
            let refused = api.send("k", "hello", None).await;
            assert_eq!(refused.status, 429);
            honour(refused.retry_after.as_deref()).await;
        }
    }
    p.shutdown().await.unwrap();

    let expected = fates(&plain.log);
    assert_eq!(expected.len(), 3, "{expected:?}");
    assert_eq!(fates(&metered.log), expected);
    assert_eq!(
        sends_of(&metered.log, "k")
            .into_iter()
            .filter(|l| *l == rate_limited_line())
            .count(),
        2
    );
}

/// Telnyx and Infobip do not say that a 429 created nothing: their
/// adapters must read it as neither a message nor a definite refusal.
fn neither_sent_nor_refused(read: &SendOutcome) -> bool {
    !matches!(
        read,
        SendOutcome::Accepted(_) | SendOutcome::Rejected { .. } | SendOutcome::NotCreated { .. }
    )
}

/// One send in a dialect's own request format, with `key` as courier's key.
async fn dialect_send(base: &str, dialect: Dialect, key: &str) -> (u16, Option<String>, Vec<u8>) {
    const ACCOUNT: &str = "ACaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let http = reqwest::Client::new();
    let req = match dialect {
        Dialect::Twilio => {
            let callback = twilio::callback_url("http://127.0.0.1:9/v1/webhooks/twilio", key);
            let sender = twilio::Sender::From("+14155552345".into());
            let form = twilio::send_params("+14155550100", "hi", &sender, Some(&callback));
            http.post(format!("{base}{}", twilio::messages_path(ACCOUNT)))
                .header(
                    "authorization",
                    twilio::basic_authorization(ACCOUNT, API_KEY),
                )
                .header("content-type", "application/x-www-form-urlencoded")
                .body(twilio::encode_form(&form))
        }
        Dialect::Telnyx => {
            let url = telnyx::webhook_url("http://127.0.0.1:9/v1/webhooks/telnyx", key);
            let body = telnyx::SendBody::new("+18445550001", "+18665550001", "hi", Some(url));
            http.post(format!("{base}/v2/messages"))
                .header("authorization", format!("Bearer {API_KEY}"))
                .json(&body)
        }
        Dialect::Infobip => {
            let url = infobip::notify_url("http://127.0.0.1:9/v1/webhooks/infobip", key, b"s");
            let body = infobip::send_body("InfoSMS", key, "+41793026727", "hi", Some(&url));
            http.post(format!("{base}/sms/3/messages"))
                .header("authorization", format!("App {API_KEY}"))
                .json(&body)
        }
        Dialect::Contract => unreachable!("the contract's face has its own test"),
    };
    let resp = req.send().await.expect("the double answers");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, retry_after, resp.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_dialect_answers_a_send_over_the_limit_with_its_own_429_and_retry_after() {
    for dialect in [Dialect::Twilio, Dialect::Telnyx, Dialect::Infobip] {
        let s = Scratch::new();
        let mut cfg = limited(&s, "1/s", 1);
        cfg.dialect = dialect;
        if dialect != Dialect::Infobip {
            cfg.set_tier("c").unwrap();
        }
        let p = start(cfg).await;
        let (status, _, body) = dialect_send(&p.url(), dialect, "k-1").await;
        assert!(
            (200..300).contains(&status),
            "{dialect}: {status} {}",
            String::from_utf8_lossy(&body)
        );
        let (status, retry_after, body) = dialect_send(&p.url(), dialect, "k-2").await;
        assert_eq!(
            (status, retry_after.as_deref()),
            (429, Some("1")),
            "{dialect}"
        );
        let v: serde_json::Value = serde_json::from_slice(&body).expect("a JSON error");
        match dialect {
            Dialect::Twilio => {
                assert_eq!(v["code"], 20429, "{v}");
                assert_eq!(v["message"], "Too Many Requests", "{v}");
                assert_eq!(v["status"], 429, "{v}");
                assert_eq!(v["more_info"], "https://www.twilio.com/docs/errors/20429");
                // Twilio documents its 429 as never processed.
                let read = twilio::classify_send(status, &body, "k-2");
                assert!(
                    matches!(read, SendOutcome::NotCreated { status: 429, .. }),
                    "{read:?}"
                );
            }
            Dialect::Telnyx => {
                let e = &v["errors"][0];
                assert_eq!(e["code"], "10011", "{v}");
                assert_eq!(e["title"], "Too many requests", "{v}");
                assert_eq!(e["detail"], "rate_limited", "{v}");
                let read = telnyx::classify_send(status, &body, "k-2");
                assert!(neither_sent_nor_refused(&read), "{read:?}");
            }
            Dialect::Infobip => {
                let e = &v["requestError"]["serviceException"];
                assert_eq!(e["messageId"], "TOO_MANY_REQUESTS", "{v}");
                assert_eq!(e["text"], "rate_limited", "{v}");
                let read = infobip::classify_send(status, &body, "k-2");
                assert!(neither_sent_nor_refused(&read), "{read:?}");
            }
            Dialect::Contract => unreachable!(),
        }
        p.shutdown().await.unwrap();
        assert_eq!(
            sends_of(&s.log, "k-1"),
            [("created".to_string(), None)],
            "{dialect}"
        );
        assert_eq!(sends_of(&s.log, "k-2"), [rate_limited_line()], "{dialect}");
    }
}
