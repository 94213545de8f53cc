//! Time and intent end to end: real PostgreSQL, real workers, the fake
//! provider over HTTP; judged by the provider's own log. A cancel races the
//! claim a thousand times; scheduled actions reach the provider only after
//! their time; actions past their deadline never reach it, unless the
//! worker is the broken one that ignores deadlines (the control).

mod common;

use chrono::{DateTime, Duration as Span, Utc};
use common::{client, limits, start_api, worker, KEY, SECRET};
use courier_core::{action_key, ActionState};
use courier_fake::{self as fake, FakeConfig};
use courier_provider::wire::{LogEntry, LogOp, SendResult};
use courier_store::{CancelOutcome, NewAction, PgStore};
use courier_testkit::fresh_db;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Every `send` line of the provider's log by key: (time, created).
fn sends_by_key(log: &Path) -> HashMap<String, Vec<(DateTime<Utc>, bool)>> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut out: HashMap<String, Vec<(DateTime<Utc>, bool)>> = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let e: LogEntry = serde_json::from_str(line).unwrap();
        if let LogOp::Send {
            key: Some(key),
            result,
            ..
        } = e.op
        {
            let at = DateTime::parse_from_rfc3339(&e.at).unwrap().to_utc();
            out.entry(key)
                .or_default()
                .push((at, result == SendResult::Created));
        }
    }
    out
}

/// The provider key of each action, by id (set at its claim).
async fn keys(store: &PgStore) -> HashMap<i64, String> {
    let c = store.client().await.unwrap();
    c.query("SELECT id, replace(uid::text, '-', '') FROM actions", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), action_key(r.get(1))))
        .collect()
}

/// Waits until no action is scheduled, pending, claimed or dispatched.
async fn until_all_ended(store: &PgStore, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let c = store.client().await.unwrap();
        let open: i64 = c
            .query_one(
                "SELECT count(*) FROM actions
                 WHERE state IN ('scheduled', 'pending', 'claimed', 'dispatched')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{open} actions still open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Rig {
    provider: fake::FakeHandle,
    api: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn rig(store: &PgStore) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("provider.jsonl");
    let mut cfg = FakeConfig::new(&log, KEY, SECRET);
    cfg.faults = courier_fake::FaultRates::NONE;
    let provider = fake::start(cfg).await.unwrap();
    let api = start_api(store.clone()).await;
    Rig {
        provider,
        api,
        log,
        _dir: dir,
    }
}

fn start_workers(
    store: &PgStore,
    r: &Rig,
    n: usize,
    stop: &CancellationToken,
    broken: bool,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let l = limits();
            let mut wk = worker(
                store,
                client(&r.provider.url(), &r.api, &l),
                l,
                &format!("w{i}"),
            );
            if broken {
                wk = wk.with_unsafe_ignore_expiry();
            }
            let stop = stop.clone();
            tokio::spawn(async move { wk.run(stop).await })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_against_the_claim_a_thousand_times_leaves_no_effect_or_exactly_one() {
    let db = fresh_db().await;
    let r = rig(&db.store).await;
    let stop = CancellationToken::new();
    let workers = start_workers(&db.store, &r, 2, &stop, false);
    const N: usize = 1_000;
    let mut outcomes = Vec::with_capacity(N);
    // Each action is cancelled right after its enqueue, while the workers
    // claim as fast as they can: some cancels come first, some claims.
    for i in 0..N {
        let new = NewAction {
            store: format!("s{}", i % 20),
            to: "+15551234567".into(),
            body: format!("race {i}"),
            ..Default::default()
        };
        let id = db.store.action_enqueue(&new).await.unwrap().id();
        if i % 3 == 1 {
            tokio::task::yield_now().await;
        }
        outcomes.push((id, db.store.action_cancel(id, "race", None).await.unwrap()));
    }
    until_all_ended(&db.store, Duration::from_secs(120)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    r.provider.shutdown().await.unwrap();
    let sends = sends_by_key(&r.log);
    let keys = keys(&db.store).await;
    let (mut cancelled, mut refused) = (0, 0);
    for (id, outcome) in outcomes {
        let created = sends
            .get(&keys[&id])
            .map_or(0, |s| s.iter().filter(|(_, c)| *c).count());
        let state = db.store.action_get(id).await.unwrap().unwrap().state;
        match outcome {
            CancelOutcome::Cancelled => {
                cancelled += 1;
                assert_eq!(state, ActionState::Cancelled);
                assert!(
                    !sends.contains_key(&keys[&id]),
                    "cancelled action {id} was sent"
                );
            }
            CancelOutcome::Refused(_) => {
                refused += 1;
                assert_eq!(state, ActionState::Done, "action {id}");
                assert_eq!(
                    created, 1,
                    "refused cancel of action {id}: {created} effects"
                );
            }
            CancelOutcome::NotFound => panic!("action {id} not found"),
        }
    }
    eprintln!(
        "{N} cancels raced the claims: {cancelled} cancelled, {refused} refused (claimed first)"
    );
    assert_eq!(cancelled + refused, N);
    assert!(
        cancelled > 0 && refused > 0,
        "one side never won: the race was not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scheduled_actions_reach_the_provider_after_their_time_and_within_a_second() {
    let db = fresh_db().await;
    let r = rig(&db.store).await;
    let stop = CancellationToken::new();
    let workers = start_workers(&db.store, &r, 2, &stop, false);
    let base = Utc::now() + Span::milliseconds(1_500);
    let mut due = HashMap::new();
    for i in 0..40 {
        let not_before = base + Span::milliseconds(50 * i);
        let new = NewAction {
            store: format!("s{}", i % 5),
            to: "+15551234567".into(),
            body: format!("later {i}"),
            not_before: Some(not_before),
            ..Default::default()
        };
        due.insert(
            db.store.action_enqueue(&new).await.unwrap().id(),
            not_before,
        );
    }
    until_all_ended(&db.store, Duration::from_secs(30)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    r.provider.shutdown().await.unwrap();
    let sends = sends_by_key(&r.log);
    let keys = keys(&db.store).await;
    let mut late_ms = Vec::new();
    for (id, not_before) in due {
        let first = sends[&keys[&id]].iter().map(|(at, _)| *at).min().unwrap();
        assert!(
            first >= not_before,
            "action {id} sent at {first}, before {not_before}"
        );
        late_ms.push((first - not_before).num_milliseconds());
    }
    late_ms.sort_unstable();
    eprintln!(
        "sent after not_before: min {} ms, max {} ms",
        late_ms[0],
        late_ms[late_ms.len() - 1]
    );
    assert!(
        *late_ms.last().unwrap() < 1_000,
        "a scheduled action waited {} ms past its time",
        late_ms.last().unwrap()
    );
}

/// Actions whose deadline passes while they wait (no worker runs until
/// then): the correct workers send none of them, the broken ones (which
/// ignore deadlines) send them all.
async fn expired_while_waiting(broken: bool) -> (usize, usize) {
    let db = fresh_db().await;
    let r = rig(&db.store).await;
    let deadline = Utc::now() + Span::milliseconds(800);
    let mut ids = Vec::new();
    for i in 0..30 {
        let new = NewAction {
            store: format!("s{}", i % 3),
            to: "+15551234567".into(),
            body: format!("urgent {i}"),
            expires_at: Some(deadline),
            ..Default::default()
        };
        ids.push(db.store.action_enqueue(&new).await.unwrap().id());
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let stop = CancellationToken::new();
    let workers = start_workers(&db.store, &r, 2, &stop, broken);
    until_all_ended(&db.store, Duration::from_secs(30)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    r.provider.shutdown().await.unwrap();
    let sends = sends_by_key(&r.log);
    let keys = keys(&db.store).await;
    let sent_late = ids
        .iter()
        .filter(|id| {
            sends
                .get(&keys[id])
                .is_some_and(|s| s.iter().any(|(at, _)| *at > deadline))
        })
        .count();
    let mut expired = 0;
    for id in &ids {
        if db.store.action_get(*id).await.unwrap().unwrap().state == ActionState::Expired {
            expired += 1;
        }
    }
    (sent_late, expired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn actions_past_their_deadline_are_never_sent_and_the_broken_worker_sends_them() {
    let (sent_late, expired) = expired_while_waiting(false).await;
    assert_eq!((sent_late, expired), (0, 30));
    let (sent_late, expired) = expired_while_waiting(true).await;
    eprintln!("the worker that ignores deadlines sent {sent_late} of 30 after their deadline");
    assert_eq!((sent_late, expired), (30, 0));
}
