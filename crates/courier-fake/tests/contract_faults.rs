//! Webhooks (signatures, retries, giving up) and the injected faults: each
//! fault observed where the courier would observe it, and each rate measured
//! over 10,000 sends at a fixed seed, within a binomial tolerance computed
//! from the sample size.

mod common;

use common::*;
use courier_core::Status;
use courier_fake::{FaultRates, MsRange};
use courier_provider::signature;
use courier_provider::wire::{LogEntry, LogOp, SendResult, WebhookAnswer};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_and_retried_until_a_2xx() {
    let rx = Receiver::start(|_, nth| if nth == 1 { 500 } else { 200 }).await;
    let s = Scratch::new();
    let p = start(s.config()).await;
    let api = Api::new(&p);
    let created = api.send("hooked", "hi", Some(&rx.url)).await.json();
    let seen = rx
        .wait_for("sent and delivered answered 200", |seen| {
            seen.iter().filter(|r| r.answered == 200).count() == 2
        })
        .await;
    assert_eq!(seen.len(), 4, "each event once refused, once accepted");
    for r in &seen {
        let sig = r.signature.as_deref().expect("X-Signature");
        assert!(
            signature::verify(SECRET.as_bytes(), &r.raw, Some(sig.as_bytes())),
            "{sig}"
        );
        assert!(!signature::verify(
            b"another secret",
            &r.raw,
            Some(sig.as_bytes())
        ));
        assert_eq!(r.event.message_id, created["id"].as_str().unwrap());
        assert_eq!(r.event.key, "hooked");
        chrono::DateTime::parse_from_rfc3339(&r.event.occurred_at).expect("RFC 3339");
        assert!(r.event.event_id.starts_with("evt_"));
    }
    // A retry is the same event: same id, same bytes.
    assert_eq!(seen[0].raw, seen[1].raw);
    assert_eq!(seen[2].raw, seen[3].raw);
    assert_eq!(seen[0].event.status, Status::Sent);
    assert_eq!(seen[2].event.status, Status::Delivered);
    assert_ne!(seen[0].event.event_id, seen[2].event.event_id);
    // The last attempt's log line is written after the receiver answered.
    eventually("the provider quiet", || p.tasks_in_flight() == 0).await;
    p.shutdown().await.unwrap();
    let attempts: Vec<(Status, u32, WebhookAnswer)> = read_log(&s.log)
        .into_iter()
        .filter_map(|e| match e.op {
            LogOp::Webhook {
                status,
                attempt,
                answer,
                ..
            } => Some((status, attempt, answer)),
            _ => None,
        })
        .collect();
    assert_eq!(
        attempts,
        vec![
            (Status::Sent, 1, WebhookAnswer::Code(500)),
            (Status::Sent, 2, WebhookAnswer::Code(200)),
            (Status::Delivered, 1, WebhookAnswer::Code(500)),
            (Status::Delivered, 2, WebhookAnswer::Code(200)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_webhook_is_retried_with_backoff_then_given_up() {
    let s = Scratch::new();
    // A port with nobody listening: every attempt fails to connect.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}/hooks", dead.local_addr().unwrap());
    drop(dead);
    let mut cfg = s.config();
    cfg.webhook_attempts_max = 4;
    cfg.webhook_backoff_base_ms = 20;
    cfg.webhook_backoff_cap_ms = 80;
    cfg.default_callback = Some(dead_url);
    let p = start(cfg).await;
    let api = Api::new(&p);
    assert_eq!(api.send("lonely", "hi", None).await.status, 201);
    eventually("both events given up", || {
        read_log_raw(&s.log)
            .iter()
            .filter(|l| l["gave_up"] == true)
            .count()
            == 2
    })
    .await;
    p.shutdown().await.unwrap();
    let raw = read_log_raw(&s.log);
    let mut by_event: HashMap<String, Vec<&serde_json::Value>> = HashMap::new();
    for l in raw.iter().filter(|l| l["op"] == "webhook") {
        by_event
            .entry(l["event_id"].as_str().unwrap().to_string())
            .or_default()
            .push(l);
    }
    assert_eq!(by_event.len(), 2);
    for (event, lines) in by_event {
        let attempts: Vec<u64> = lines
            .iter()
            .map(|l| l["attempt"].as_u64().unwrap())
            .collect();
        assert_eq!(attempts, vec![1, 2, 3, 4], "{event}");
        assert!(lines
            .iter()
            .all(|l| l["answer"] == "timeout" && l["error"].is_string()));
        assert_eq!(lines.iter().filter(|l| l["gave_up"] == true).count(), 1);
        assert_eq!(lines[3]["gave_up"], true);
        // Backoff: the attempts are spread out, not back to back.
        let at = |l: &serde_json::Value| {
            chrono::DateTime::parse_from_rfc3339(l["at"].as_str().unwrap()).unwrap()
        };
        let spread = at(lines[3]) - at(lines[0]);
        assert!(
            spread >= chrono::Duration::milliseconds(10 + 20 + 40),
            "{event}: {spread}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_is_logged_as_a_timeout() {
    // Accepts connections and reads nothing: the provider's time-out fires.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", silent.local_addr().unwrap());
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = silent.accept().await {
            keep.lock().unwrap().push(sock);
        }
    });
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.webhook_timeout_ms = 100;
    cfg.webhook_attempts_max = 2;
    let p = start(cfg).await;
    let api = Api::new(&p);
    assert_eq!(api.send("slow", "hi", Some(&url)).await.status, 201);
    eventually("two attempts of the sent event", || {
        count(&read_log_so_far(&s.log), |op| {
            matches!(op, LogOp::Webhook { .. })
        }) >= 2
    })
    .await;
    p.shutdown().await.unwrap();
    let first_two: Vec<_> = read_log(&s.log)
        .into_iter()
        .filter_map(|e| match e.op {
            LogOp::Webhook {
                attempt, answer, ..
            } => Some((attempt, answer)),
            _ => None,
        })
        .take(2)
        .collect();
    assert_eq!(
        first_two,
        vec![(1, WebhookAnswer::timeout()), (2, WebhookAnswer::timeout())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_out_of_order_and_late_failed_webhooks_reach_the_receiver() {
    let rx = Receiver::start(|_, _| 200).await;
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.faults = FaultRates {
        timeout: 0.0,
        duplicate_webhook: 1.0,
        out_of_order: 1.0,
        late_failed: 1.0,
    };
    let p = start(cfg).await;
    let api = Api::new(&p);
    let n = 20;
    for i in 0..n {
        assert_eq!(
            api.send(&format!("f-{i}"), "hi", Some(&rx.url))
                .await
                .status,
            201
        );
    }
    let seen = rx
        .wait_for("two events, each twice, per message", |seen| {
            seen.len() == 4 * n
        })
        .await;
    let mut per_message: HashMap<&str, Vec<&Received>> = HashMap::new();
    for r in &seen {
        per_message
            .entry(r.event.message_id.as_str())
            .or_default()
            .push(r);
    }
    assert_eq!(per_message.len(), n);
    for (m, rs) in per_message {
        let order: Vec<Status> = rs.iter().map(|r| r.event.status).collect();
        assert_eq!(
            order,
            vec![Status::Failed, Status::Failed, Status::Sent, Status::Sent],
            "{m}: the final event first, each twice, never delivered"
        );
        assert_eq!(rs[0].raw, rs[1].raw, "a duplicate is the same event");
        assert_eq!(rs[2].raw, rs[3].raw);
    }
    // The last duplicate's log line is written after the receiver answered.
    eventually("the provider quiet", || p.tasks_in_flight() == 0).await;
    p.shutdown().await.unwrap();
    // The log keeps the true order: sent before failed for every message.
    let log = read_log(&s.log);
    let mut sent = HashSet::new();
    for e in &log {
        if let LogOp::Status { key, status, .. } = &e.op {
            match status {
                Status::Sent => assert!(sent.insert(key.clone())),
                Status::Failed => assert!(sent.contains(key), "{key}: failed logged before sent"),
                other => panic!("{key}: unexpected {other}"),
            }
        }
    }
    let dups = read_log_raw(&s.log)
        .iter()
        .filter(|l| l["duplicate"] == true)
        .count();
    assert_eq!(dups, 2 * n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_send_is_held_then_504_and_its_repeat_behaves_normally() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.faults.timeout = 1.0;
    cfg.timeout_hold_ms = 300;
    let p = start(cfg).await;
    let api = Api::new(&p);
    let keys: Vec<String> = (0..30).map(|i| format!("t-{i}")).collect();
    let mut firsts = Vec::new();
    for key in &keys {
        let (api, key) = (api.clone(), key.clone());
        firsts.push(tokio::spawn(async move {
            let t = Instant::now();
            let a = api.send(&key, "hi", None).await;
            (a, t.elapsed())
        }));
    }
    for f in firsts {
        let (a, took) = f.await.unwrap();
        assert_eq!(a.status, 504);
        assert!(took >= Duration::from_millis(300), "held only {took:?}");
    }
    let log = read_log(&s.log);
    let created: HashSet<&String> = keys
        .iter()
        .filter(|k| sends_with(&log, k, SendResult::Created) == 1)
        .collect();
    let faulted: HashSet<&String> = keys
        .iter()
        .filter(|k| sends_with(&log, k, SendResult::Faulted) == 1)
        .collect();
    assert_eq!(created.len() + faulted.len(), keys.len());
    assert!(created.is_disjoint(&faulted));
    assert!(
        !created.is_empty() && !faulted.is_empty(),
        "both sides of the fault occur"
    );
    for key in &keys {
        let a = api.send(key, "hi", None).await;
        assert_eq!(a.status, 201, "{key}: the repeat is not held again");
        // Created before the lost answer: a replay. Faulted before: new.
        assert_eq!(a.replayed, created.contains(key), "{key}");
    }
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    for key in &keys {
        assert_eq!(sends_with(&log, key, SendResult::Created), 1, "{key}");
    }
}

/// `|measured - p| <= 4 sd` of a binomial proportion over `n` trials.
fn assert_rate(what: &str, hits: usize, n: usize, p: f64) {
    assert!(n > 0, "{what}: no trials");
    let measured = hits as f64 / n as f64;
    let tolerance = 4.0 * (p * (1.0 - p) / n as f64).sqrt();
    eprintln!("{what}: {hits}/{n} = {measured:.4}, expected {p} +- {tolerance:.4}");
    assert!(
        (measured - p).abs() <= tolerance,
        "{what}: measured {measured:.4} over {n}, expected {p} within {tolerance:.4}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_rates_match_their_settings_over_10000_sends() {
    let rx = Receiver::start(|_, _| 200).await;
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.seed = 20_260_101;
    cfg.faults = FaultRates::DEFAULT;
    cfg.timeout_hold_ms = 1;
    cfg.sent_after_ms = MsRange::new(0, 5);
    cfg.delivered_after_ms = MsRange::new(0, 5);
    cfg.failed_after_ms = MsRange::new(0, 10);
    cfg.webhook_concurrency_max = 64;
    cfg.default_callback = Some(rx.url.clone());
    let rates = cfg.faults;
    let p = start(cfg).await;
    let api = Api::new(&p);

    let n = 10_000;
    let started = Instant::now();
    let timed_out = send_many(&api, n).await;
    eprintln!("{n} sends in {:?}", started.elapsed());
    let created = count(&read_log(&s.log), |op| {
        matches!(
            op,
            LogOp::Send {
                result: SendResult::Created,
                ..
            }
        )
    });
    // Two events per message (sent and final), then the duplicates' tails.
    rx.wait_accepted(2 * created).await;
    eventually("the provider quiet", || p.tasks_in_flight() == 0).await;
    eprintln!("all final and delivered after {:?}", started.elapsed());
    p.shutdown().await.unwrap();

    let before = timeouts_split(&read_log_raw(&s.log), &timed_out, n, rates);
    assert_eq!(created, n - before);
    finals_once_and_late_failures(&read_log(&s.log), created, rates);
    deliveries_out_of_order_and_twice(&rx.seen(), created, rates);
}

/// Sends `rate-0` .. `rate-{n-1}`, 64 at a time; the keys answered 504.
async fn send_many(api: &Api, n: usize) -> HashSet<String> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (api, next) = (api.clone(), next.clone());
        workers.spawn(async move {
            let mut timed_out = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return timed_out;
                }
                let key = format!("rate-{i}");
                let a = api.send(&key, "hi", None).await;
                match a.status {
                    201 => {}
                    504 => timed_out.push(key),
                    other => panic!("{key}: {other}"),
                }
            }
        });
    }
    let mut timed_out = HashSet::new();
    while let Some(w) = workers.join_next().await {
        timed_out.extend(w.unwrap());
    }
    timed_out
}

/// Time-outs: per first send, then split before/after creation. Returns
/// how many came before creating the message.
fn timeouts_split(
    raw: &[serde_json::Value],
    timed_out: &HashSet<String>,
    n: usize,
    rates: FaultRates,
) -> usize {
    assert_rate("timeout", timed_out.len(), n, rates.timeout);
    let keys_with = |result: &str, fault: &str| -> HashSet<String> {
        raw.iter()
            .filter(|l| l["result"] == result && l["fault"] == fault)
            .map(|l| l["key"].as_str().unwrap().to_string())
            .collect()
    };
    let after = keys_with("created", "timeout_after_create");
    let before = keys_with("faulted", "timeout_before_create");
    assert!(after.is_disjoint(&before));
    assert_eq!(
        &(&after | &before),
        timed_out,
        "every 504 is one of the two kinds"
    );
    assert_rate("timeout after creating", after.len(), timed_out.len(), 0.5);
    before.len()
}

/// Exactly one final status per message; late failures at their rate.
fn finals_once_and_late_failures(log: &[LogEntry], created: usize, rates: FaultRates) {
    let mut finals: HashMap<&str, Status> = HashMap::new();
    for e in log {
        if let LogOp::Status {
            key,
            status,
            is_final: true,
            ..
        } = &e.op
        {
            assert!(finals.insert(key, *status).is_none(), "{key}: two finals");
        }
    }
    assert_eq!(finals.len(), created);
    let failed = finals.values().filter(|s| **s == Status::Failed).count();
    assert_rate("late failed", failed, created, rates.late_failed);
}

/// At the receiver: out-of-order and duplicate deliveries at their rates.
fn deliveries_out_of_order_and_twice(seen: &[Received], created: usize, rates: FaultRates) {
    let mut first_event: HashMap<&str, Status> = HashMap::new();
    let mut deliveries: HashMap<&str, usize> = HashMap::new();
    for r in seen {
        assert_eq!(r.answered, 200);
        first_event
            .entry(r.event.message_id.as_str())
            .or_insert(r.event.status);
        *deliveries.entry(r.event.event_id.as_str()).or_default() += 1;
    }
    assert_eq!(
        first_event.len(),
        created,
        "every message's webhooks arrived"
    );
    assert_eq!(
        deliveries.len(),
        2 * created,
        "sent and final events for every message"
    );
    assert!(deliveries.values().all(|d| *d <= 2));
    let final_first = first_event.values().filter(|s| s.is_final()).count();
    assert_rate("out of order", final_first, created, rates.out_of_order);
    let twice = deliveries.values().filter(|d| **d == 2).count();
    assert_rate(
        "duplicate webhook",
        twice,
        deliveries.len(),
        rates.duplicate_webhook,
    );
}
