//! The tier modes over real HTTP: `ignore_key` (no deduplication, the key a
//! reference that lookups find the earliest message by, each message behind
//! its own lag), `lookup` off (`501`, logged `faulted`), a restart in
//! ignore-key mode, and a log of the other mode refused.

mod common;

use common::*;
use courier_core::Status;
use courier_fake::{self as fake, FakeConfig, FakeError, FaultRates, Latency, MsRange};
use courier_provider::wire::{LogOp, LookupResult, MessageView, SendResult};
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The fast, fault-free settings, without deduplication.
fn ignoring_keys(s: &Scratch) -> FakeConfig {
    let mut cfg = s.config();
    cfg.ignore_key = true;
    cfg
}

fn view(a: &Answer) -> MessageView {
    serde_json::from_slice(&a.body)
        .unwrap_or_else(|e| panic!("not a message ({e}): {} {:?}", a.status, a.body))
}

/// The `ordinal` of each `created` line of `key`, in log order.
fn created_ordinals(log: &Path, key: &str) -> Vec<u64> {
    read_log_raw(log)
        .iter()
        .filter(|l| l["op"] == "send" && l["result"] == "created" && l["key"] == key)
        .map(|l| {
            l["ordinal"]
                .as_u64()
                .expect("a created line carries its ordinal")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_key_two_sends_of_one_key_make_two_messages_and_the_lookup_answers_the_first() {
    let s = Scratch::new();
    let p = start(ignoring_keys(&s)).await;
    let api = Api::new(&p);
    let first = api.send("dup", "hello", None).await;
    let second = api.send("dup", "hello", None).await;
    // Another body under the same key is not a 422 either: one more message.
    let third = api.send("dup", "another text", None).await;
    for a in [&first, &second, &third] {
        assert_eq!((a.status, a.replayed), (201, false));
        assert_eq!(view(a).key, "dup");
    }
    let ids: HashSet<String> = [&first, &second, &third]
        .iter()
        .map(|a| view(a).id)
        .collect();
    assert_eq!(ids.len(), 3, "three messages: {ids:?}");
    let found = api.lookup("dup").await;
    assert_eq!(found.status, 200);
    assert_eq!(view(&found).id, view(&first).id, "the earliest message");
    assert_eq!(api.lookup("never-sent").await.status, 404);
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(sends_with(&log, "dup", SendResult::Created), 3);
    for result in [
        SendResult::Replayed,
        SendResult::Conflict,
        SendResult::Reused,
    ] {
        assert_eq!(sends_with(&log, "dup", result), 0, "{result:?}");
    }
    assert_eq!(created_ordinals(&s.log, "dup"), vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_key_concurrent_sends_of_one_key_are_never_409() {
    let s = Scratch::new();
    let mut cfg = ignoring_keys(&s);
    // Each send takes a second, so the two overlap.
    cfg.latency = Latency::Fixed { ms: 1_000 };
    let p = start(cfg).await;
    let api = Api::new(&p);
    let (a, b) = tokio::join!(api.send("k", "hi", None), api.send("k", "hi", None));
    assert_eq!((a.status, b.status), (201, 201));
    assert_ne!(view(&a).id, view(&b).id);
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(sends_with(&log, "k", SendResult::Created), 2);
    assert_eq!(sends_with(&log, "k", SendResult::Conflict), 0);
    let mut ordinals = created_ordinals(&s.log, "k");
    ordinals.sort_unstable();
    assert_eq!(ordinals, vec![0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_key_lookups_404_until_the_lag_has_passed_since_the_message_was_created() {
    let s = Scratch::new();
    let mut cfg = ignoring_keys(&s);
    cfg.lookup_lag_ms = 400;
    let p = start(cfg).await;
    let api = Api::new(&p);
    let sent_at = Instant::now();
    let first = api.send("lagged", "hi", None).await;
    assert_eq!(first.status, 201);
    let early = api.lookup("lagged").await;
    assert_eq!(early.status, 404, "inside the lag no message is visible");
    assert_eq!(early.error(), "not_found");
    let deadline = Instant::now() + WAIT;
    let found = loop {
        let a = api.lookup("lagged").await;
        if a.status == 200 {
            break a;
        }
        assert_eq!(a.status, 404);
        assert!(Instant::now() < deadline, "never visible");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        sent_at.elapsed() >= Duration::from_millis(400),
        "visible after {:?}",
        sent_at.elapsed()
    );
    assert_eq!(view(&found).id, view(&first).id);
    // A later message of the reference has a lag of its own; the lookup
    // keeps answering the earliest visible one.
    let later = api.send("lagged", "hi", None).await;
    assert_eq!((later.status, later.replayed), (201, false));
    assert_eq!(view(&api.lookup("lagged").await).id, view(&first).id);
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(sends_with(&log, "lagged", SendResult::Created), 2);
    assert!(
        count(&log, |op| matches!(
            op,
            LogOp::Lookup {
                result: LookupResult::NotFound,
                ..
            }
        )) >= 1
    );
}

/// Sends `key` (every answer lost) until a send creates its message;
/// returns that message's id and when its `created` line was seen.
async fn send_until_created(api: &Api, log: &Path, key: &str) -> (String, Instant) {
    for _ in 0..40 {
        assert_eq!(api.send(key, "hi", None).await.status, 504);
        let id = read_log_so_far(log).into_iter().find_map(|e| match e.op {
            LogOp::Send {
                key: Some(k),
                result: SendResult::Created,
                message_id,
            } if k == key => message_id,
            _ => None,
        });
        if let Some(id) = id {
            return (id, Instant::now());
        }
    }
    panic!("no send of {key} created its message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_key_lag_counts_from_each_messages_creation_not_the_keys_first_send() {
    let s = Scratch::new();
    let mut cfg = ignoring_keys(&s);
    cfg.lookup_lag_ms = 1_000;
    // Every send's answer is lost, before or after creating its message.
    cfg.faults.timeout = 1.0;
    cfg.timeout_hold_ms = 1;
    let p = start(cfg).await;
    let api = Api::new(&p);
    // A key whose first send was lost before creating anything.
    let mut key = None;
    for i in 0..40 {
        let k = format!("late-{i}");
        assert_eq!(api.send(&k, "hi", None).await.status, 504);
        if sends_with(&read_log_so_far(&s.log), &k, SendResult::Faulted) == 1 {
            key = Some(k);
            break;
        }
    }
    let key = key.expect("a first send lost before creating");
    // Past the lag since the key's first send, a message is created.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (id, created_at) = send_until_created(&api, &s.log, &key).await;
    let early = api.lookup(&key).await;
    assert_eq!(early.status, 404, "visible before its own lag");
    let deadline = Instant::now() + WAIT;
    while api.lookup(&key).await.status != 200 {
        assert!(Instant::now() < deadline, "never visible");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(created_at.elapsed() >= Duration::from_millis(900));
    assert_eq!(view(&api.lookup(&key).await).id, id);
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_send_may_time_out_in_ignore_key_mode() {
    let s = Scratch::new();
    let mut cfg = ignoring_keys(&s);
    cfg.faults.timeout = 1.0;
    cfg.timeout_hold_ms = 5;
    let p = start(cfg).await;
    let api = Api::new(&p);
    let n = 20;
    for _ in 0..n {
        assert_eq!(api.send("lossy", "hi", None).await.status, 504);
    }
    p.shutdown().await.unwrap();
    let raw = read_log_raw(&s.log);
    let with_fault = |result: &str, fault: &str| {
        raw.iter()
            .filter(|l| l["key"] == "lossy" && l["result"] == result && l["fault"] == fault)
            .count()
    };
    let after = with_fault("created", "timeout_after_create");
    let before = with_fault("faulted", "timeout_before_create");
    assert_eq!(after + before, n, "every send drew its own fault");
    assert!(after > 0 && before > 0, "{after} after, {before} before");
    let ordinals: HashSet<u64> = raw
        .iter()
        .filter(|l| l["key"] == "lossy" && l["op"] == "send")
        .map(|l| l["ordinal"].as_u64().expect("an ordinal"))
        .collect();
    assert_eq!(ordinals, (0..n as u64).collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_max_counts_messages_in_ignore_key_mode() {
    let s = Scratch::new();
    let mut cfg = ignoring_keys(&s);
    cfg.keys_max = 2;
    let p = start(cfg).await;
    let api = Api::new(&p);
    assert_eq!(api.send("one-key", "hi", None).await.status, 201);
    assert_eq!(api.send("one-key", "hi", None).await.status, 201);
    let third = api.send("one-key", "hi", None).await;
    assert_eq!(third.status, 503, "two messages of one key fill keys_max 2");
    assert_eq!(third.error(), "overloaded");
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    assert_eq!(sends_with(&log, "one-key", SendResult::Created), 2);
    assert_eq!(sends_with(&log, "one-key", SendResult::Faulted), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_sweep_forgets_sends_in_ignore_key_mode() {
    let s = Scratch::new();
    let mut cfg = ignoring_keys(&s);
    cfg.key_retention_ms = 300;
    // One remembered send fills it: only the sweep frees the room.
    cfg.keys_max = 1;
    let p = start(cfg).await;
    let api = Api::new(&p);
    let first = api.send("short", "hi", None).await;
    assert_eq!(first.status, 201);
    let sent_at = Instant::now();
    assert_eq!(api.send("short", "hi", None).await.status, 503);
    let deadline = Instant::now() + WAIT;
    let again = loop {
        let a = api.send("short", "hi", None).await;
        if a.status == 201 {
            break a;
        }
        assert_eq!(a.status, 503);
        assert!(Instant::now() < deadline, "the send is never forgotten");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        sent_at.elapsed() >= Duration::from_millis(250),
        "forgotten too early"
    );
    assert_ne!(view(&again).id, view(&first).id);
    let found = api.lookup("short").await;
    assert_eq!(view(&found).id, view(&again).id, "the first is forgotten");
    p.shutdown().await.unwrap();
    // Nothing of the key was remembered, so its count started again.
    assert_eq!(created_ordinals(&s.log, "short"), vec![0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lookup_answers_501_and_logs_a_faulted_lookup() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.lookup = false;
    let p = start(cfg).await;
    let api = Api::new(&p);
    let sent = api.send("k", "hi", None).await;
    assert_eq!(sent.status, 201);
    for key in ["k", "never-sent"] {
        let a = api.lookup(key).await;
        assert_eq!(a.status, 501, "{key}");
        assert_eq!(a.error(), "lookup_not_supported");
    }
    // Auth is still checked first, and the key still deduplicates.
    assert_eq!(api.lookup_raw(None, "k").await.status, 401);
    let again = api.send("k", "hi", None).await;
    assert_eq!((again.status, again.replayed), (201, true));
    assert_eq!(again.body, sent.body);
    p.shutdown().await.unwrap();
    let log = read_log(&s.log);
    let lookups: Vec<(String, LookupResult)> = log
        .iter()
        .filter_map(|e| match &e.op {
            LogOp::Lookup { key, result, .. } => Some((key.clone(), *result)),
            _ => None,
        })
        .collect();
    assert_eq!(
        lookups,
        vec![
            ("k".to_string(), LookupResult::Faulted),
            ("never-sent".to_string(), LookupResult::Faulted)
        ]
    );
    let faults: Vec<serde_json::Value> = read_log_raw(&s.log)
        .into_iter()
        .filter(|l| l["op"] == "lookup")
        .map(|l| l["fault"].clone())
        .collect();
    assert_eq!(faults, vec!["lookup_not_supported"; 2]);
    assert_eq!(sends_with(&log, "k", SendResult::Created), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_ignore_key_mode_keeps_both_messages_and_their_webhooks() {
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
    let mut cfg = ignoring_keys(&s);
    cfg.sent_after_ms = MsRange::new(0, 5);
    // Long enough that no message reaches its final status before the stop.
    cfg.delivered_after_ms = MsRange::new(1_500, 1_500);
    cfg.webhook_attempts_max = 100;
    cfg.webhook_backoff_base_ms = 20;
    cfg.webhook_backoff_cap_ms = 40;
    let p = start(cfg.clone()).await;
    let api = Api::new(&p);
    let first = view(&api.send("twice", "hi", Some(&rx.url)).await);
    let second = view(&api.send("twice", "hi", Some(&rx.url)).await);
    assert_ne!(first.id, second.id);
    rx.wait_for("a refused sent event of each message", |seen| {
        seen.iter()
            .map(|r| r.event.message_id.as_str())
            .collect::<HashSet<_>>()
            .len()
            == 2
    })
    .await;
    p.shutdown().await.unwrap();
    let lines_before = read_log(&s.log).len();

    accept.store(true, Ordering::SeqCst);
    let p = start(cfg).await;
    assert_eq!(p.recovered.keys, 1);
    assert_eq!(p.recovered.messages, 2, "both messages of the key");
    assert_eq!(p.recovered.transitions, 2, "each final status still due");
    assert_eq!(p.recovered.webhooks, 2, "each sent event still undelivered");
    let api = Api::new(&p);
    assert_eq!(view(&api.lookup("twice").await).id, first.id);
    let third = api.send("twice", "hi", Some(&rx.url)).await;
    assert_eq!((third.status, third.replayed), (201, false));
    let third = view(&third);
    assert!(third.id != first.id && third.id != second.id, "{third:?}");
    let seen = rx
        .wait_for("sent and delivered accepted for three messages", |seen| {
            seen.iter().filter(|r| r.answered == 200).count() == 6
        })
        .await;
    p.shutdown().await.unwrap();
    let ids = [first.id, second.id, third.id];
    sent_and_delivered_accepted(&seen, "twice", &ids);
    let log = read_log(&s.log);
    assert_eq!(log[lines_before].seq, lines_before as u64 + 1);
    assert_eq!(sends_with(&log, "twice", SendResult::Created), 3);
    assert_eq!(
        count(&log, |op| matches!(
            op,
            LogOp::Status { is_final: true, .. }
        )),
        3,
        "one final status per message"
    );
    // The restarted provider counts on from the sends it remembered.
    assert_eq!(created_ordinals(&s.log, "twice"), vec![0, 1, 2]);
}

/// Both events of each message were answered 200, each carrying `key`.
fn sent_and_delivered_accepted(seen: &[Received], key: &str, ids: &[String]) {
    let accepted: HashSet<(String, Status)> = seen
        .iter()
        .filter(|r| r.answered == 200)
        .inspect(|r| assert_eq!(r.event.key, key))
        .map(|r| (r.event.message_id.clone(), r.event.status))
        .collect();
    for id in ids {
        for status in [Status::Sent, Status::Delivered] {
            assert!(accepted.contains(&(id.clone(), status)), "{id} {status}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_of_the_other_deduplication_mode_is_refused() {
    for written_ignoring_keys in [true, false] {
        let s = Scratch::new();
        let mut cfg = s.config();
        cfg.ignore_key = written_ignoring_keys;
        let p = start(cfg.clone()).await;
        assert_eq!(Api::new(&p).send("k", "hi", None).await.status, 201);
        p.shutdown().await.unwrap();
        cfg.ignore_key = !written_ignoring_keys;
        match fake::start(cfg).await {
            Err(FakeError::Config(why)) => {
                assert!(why.contains("--ignore-key"), "{why}");
                assert!(why.contains("line 1"), "{why}");
            }
            Err(other) => panic!("wrong error: {other}"),
            Ok(_) => panic!("a log of the other mode was read ({written_ignoring_keys})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_mode_still_deduplicates_and_answers_lookups() {
    let s = Scratch::new();
    let mut cfg = s.config();
    cfg.faults = FaultRates::NONE;
    assert_eq!(cfg.tier(), "a");
    let p = start(cfg).await;
    let api = Api::new(&p);
    let first = api.send("k", "hi", None).await;
    let again = api.send("k", "hi", None).await;
    assert_eq!(
        (first.status, again.status, again.replayed),
        (201, 201, true)
    );
    assert_eq!(api.send("k", "other", None).await.status, 422);
    assert_eq!(view(&api.lookup("k").await).id, view(&first).id);
    p.shutdown().await.unwrap();
    let raw = read_log_raw(&s.log);
    assert!(
        raw.iter().all(|l| l.get("ordinal").is_none()),
        "the default mode writes no ordinal"
    );
    assert_eq!(sends_with(&read_log(&s.log), "k", SendResult::Created), 1);
}
