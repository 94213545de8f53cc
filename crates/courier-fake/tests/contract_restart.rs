//! A provider restarted on its own log: repeats are replayed (never a second
//! message), lookups still answer, undelivered webhooks and remaining status
//! changes resume, a torn last line is cut off, and `seq` continues.

mod common;

use common::*;
use courier_core::Status;
use courier_fake::{self as fake, FakeError, FaultRates, MsRange};
use courier_provider::wire::{LogEntry, LogOp, MessageView, SendResult};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_repeats_are_replayed_and_lookups_still_answer() {
    let s = Scratch::new();
    let n = 30;
    let p = start(s.config()).await;
    let api = Api::new(&p);
    let mut first_answers = HashMap::new();
    for i in 0..n {
        let a = api
            .send(&format!("r-{i}"), &format!("text {i}"), None)
            .await;
        assert_eq!(a.status, 201);
        first_answers.insert(i, a.body);
    }
    eventually("every message final", || {
        lines_with(&s.log, r#""final":true"#) == n
    })
    .await;
    let mut statuses = HashMap::new();
    for i in 0..n {
        let v: MessageView =
            serde_json::from_slice(&api.lookup(&format!("r-{i}")).await.body).unwrap();
        statuses.insert(i, v);
    }
    p.shutdown().await.unwrap();
    let before = read_log(&s.log).len() as u64;

    let p = start(s.config()).await;
    assert_eq!(p.recovered.lines, before);
    assert_eq!(p.recovered.keys, n);
    assert_eq!(p.recovered.transitions, 0);
    let api = Api::new(&p);
    for i in 0..n {
        let key = format!("r-{i}");
        let again = api.send(&key, &format!("text {i}"), None).await;
        assert_eq!((again.status, again.replayed), (201, true), "{key}");
        assert_eq!(
            again.body, first_answers[&i],
            "{key}: the first answer, byte for byte"
        );
        let reused = api.send(&key, "another text", None).await;
        assert_eq!(
            reused.status, 422,
            "{key}: the fingerprint survived the restart"
        );
        let v: MessageView = serde_json::from_slice(&api.lookup(&key).await.body).unwrap();
        assert_eq!(v, statuses[&i], "{key}: the lookup answers as before");
    }
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(
        log[before as usize].seq,
        before + 1,
        "seq continues after the restart"
    );
    for i in 0..n {
        assert_eq!(sends_with(&log, &format!("r-{i}"), SendResult::Created), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_undelivered_webhooks_and_planned_status_changes() {
    let accept = Arc::new(AtomicBool::new(false));
    let gate = accept.clone();
    let rx = Receiver::start(move |_, _| {
        if gate.load(Ordering::SeqCst) {
            200
        } else {
            503
        }
    })
    .await;
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.sent_after_ms = MsRange::new(0, 5);
    // Long enough that no message reaches its final status before the stop.
    cfg.delivered_after_ms = MsRange::new(1_500, 1_500);
    cfg.webhook_attempts_max = 100;
    cfg.webhook_backoff_base_ms = 20;
    cfg.webhook_backoff_cap_ms = 40;
    let n = 10;
    let p = start(cfg.clone()).await;
    let api = Api::new(&p);
    for i in 0..n {
        let sent = api.send(&format!("w-{i}"), "hi", Some(&rx.url)).await;
        assert_eq!(sent.status, 201);
    }
    // Every message is sent, and its `sent` webhook was refused at least once.
    rx.wait_for("a refused sent event per message", |seen| {
        seen.iter()
            .map(|r| r.event.message_id.as_str())
            .collect::<HashSet<_>>()
            .len()
            == n
    })
    .await;
    let stopped_at = std::time::Instant::now();
    p.shutdown().await.unwrap();
    let before = read_log(&s.log);
    assert_eq!(
        count(&before, |op| matches!(
            op,
            LogOp::Status { is_final: true, .. }
        )),
        0
    );
    let attempts_before = last_attempts(&before);

    accept.store(true, Ordering::SeqCst);
    let p = start(cfg).await;
    assert_eq!(
        p.recovered.transitions, n,
        "each message's final status is still due"
    );
    assert_eq!(
        p.recovered.webhooks, n,
        "each message's sent event is still undelivered"
    );
    let seen = rx
        .wait_for("sent and delivered accepted for every message", |seen| {
            seen.iter().filter(|r| r.answered == 200).count() == 2 * n
        })
        .await;
    p.shutdown().await.unwrap();
    // The final status came on the plan's schedule, not at the restart.
    assert!(stopped_at.elapsed() >= std::time::Duration::from_millis(1_000));
    sent_and_delivered_accepted(&seen, n);
    let after = read_log(&s.log);
    assert_eq!(after[before.len()].seq, before.len() as u64 + 1);
    only_the_plan_continues(&after[before.len()..], &attempts_before);
}

/// The last attempt logged for each event.
fn last_attempts(log: &[LogEntry]) -> HashMap<String, u32> {
    let mut attempts: HashMap<String, u32> = HashMap::new();
    for e in log {
        if let LogOp::Webhook {
            event_id, attempt, ..
        } = &e.op
        {
            attempts.insert(event_id.clone(), *attempt);
        }
    }
    attempts
}

/// Both events of `w-0` .. `w-{n-1}` were answered 200.
fn sent_and_delivered_accepted(seen: &[Received], n: usize) {
    let accepted: HashSet<(String, Status)> = seen
        .iter()
        .filter(|r| r.answered == 200)
        .map(|r| (r.event.key.clone(), r.event.status))
        .collect();
    for i in 0..n {
        let key = format!("w-{i}");
        assert!(accepted.contains(&(key.clone(), Status::Sent)), "{key}");
        assert!(
            accepted.contains(&(key.clone(), Status::Delivered)),
            "{key}"
        );
    }
}

/// After the restart: no new message, only the planned final statuses, and
/// each webhook's attempts counting on from where they stopped.
fn only_the_plan_continues(after: &[LogEntry], attempts_before: &HashMap<String, u32>) {
    for e in after {
        match &e.op {
            LogOp::Send {
                result: SendResult::Created,
                ..
            } => panic!("a new message after the restart"),
            LogOp::Status { status, .. } => assert_eq!(*status, Status::Delivered),
            LogOp::Webhook {
                event_id, attempt, ..
            } => {
                if let Some(earlier) = attempts_before.get(event_id) {
                    assert!(
                        attempt > earlier,
                        "{event_id}: attempt {attempt} after {earlier}"
                    );
                }
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_are_still_replayed_after_a_restart() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.faults.timeout = 1.0;
    cfg.timeout_hold_ms = 10;
    let p = start(cfg.clone()).await;
    let api = Api::new(&p);
    let keys: Vec<String> = (0..20).map(|i| format!("lost-{i}")).collect();
    for key in &keys {
        assert_eq!(api.send(key, "hi", None).await.status, 504);
    }
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    let created: HashSet<&String> = keys
        .iter()
        .filter(|k| sends_with(&log, k, SendResult::Created) == 1)
        .collect();
    assert!(!created.is_empty() && created.len() < keys.len());

    // Same seed: the first send of each key was already spent, so no new
    // time-outs; a key created before its lost answer is replayed.
    let p = start(cfg).await;
    let api = Api::new(&p);
    for key in &keys {
        let a = api.send(key, "hi", None).await;
        assert_eq!(a.status, 201, "{key}");
        assert_eq!(a.replayed, created.contains(key), "{key}");
    }
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    for key in &keys {
        assert_eq!(sends_with(&log, key, SendResult::Created), 1, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_line_is_cut_off_and_seq_continues() {
    let s = Scratch::new();
    let p = start(s.config()).await;
    let api = Api::new(&p);
    assert_eq!(api.send("torn", "hi", None).await.status, 201);
    eventually("a final status", || {
        lines_with(&s.log, r#""final":true"#) == 1
    })
    .await;
    p.shutdown().await.unwrap();
    let whole = read_log(&s.log).len() as u64;
    let torn = format!(
        r#"{{"seq":{},"at":"2026-01-01T00:00:00.000Z","op":"send","key":"x","res"#,
        whole + 1
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(&s.log)
        .unwrap()
        .write_all(torn.as_bytes())
        .unwrap();

    let p = start(s.config()).await;
    assert_eq!(p.recovered.lines, whole);
    assert_eq!(p.recovered.torn_bytes, torn.len() as u64);
    let api = Api::new(&p);
    assert!(api.send("torn", "hi", None).await.replayed);
    assert_eq!(
        api.lookup("x").await.status,
        404,
        "the torn line created nothing"
    );
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(
        log.len() as u64,
        whole + 2,
        "a replay and a lookup after the cut"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_is_refused_not_skipped() {
    let s = Scratch::new();
    let p = start(s.config()).await;
    let api = Api::new(&p);
    for i in 0..3 {
        assert_eq!(api.send(&format!("d-{i}"), "hi", None).await.status, 201);
    }
    p.shutdown().await.unwrap();
    let text = std::fs::read_to_string(&s.log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = "{\"seq\":2,\"garbage\":";
    std::fs::write(&s.log, lines.join("\n") + "\n").unwrap();
    match fake::start(s.config()).await {
        Err(FakeError::LogCorrupt { line, .. }) => assert_eq!(line, 2),
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a damaged log was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_another_seed_keeps_each_messages_plan() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.faults = FaultRates {
        late_failed: 1.0,
        ..FaultRates::NONE
    };
    cfg.failed_after_ms = MsRange::new(800, 800);
    let p = start(cfg.clone()).await;
    let api = Api::new(&p);
    assert_eq!(api.send("planned", "hi", None).await.status, 201);
    eventually("sent", || lines_with(&s.log, r#""status":"sent""#) == 1).await;
    p.shutdown().await.unwrap();
    // Another seed and no late failures configured: the plan in the log wins.
    cfg.seed = 99;
    cfg.faults = FaultRates::NONE;
    let p = start(cfg).await;
    eventually("final", || lines_with(&s.log, r#""final":true"#) == 1).await;
    p.shutdown().await.unwrap();
    let finals: Vec<Status> = read_log(&s.log)
        .into_iter()
        .filter_map(|e| match e.op {
            LogOp::Status {
                status,
                is_final: true,
                ..
            } => Some(status),
            _ => None,
        })
        .collect();
    assert_eq!(finals, vec![Status::Failed]);
}
