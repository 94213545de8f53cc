//! The real worker crashed at its crash points (feature `failpoints`),
//! against the real store and the fake provider (faults on), with a tiny
//! model of what the crash points saw. It does to the real worker what
//! `courier-sim`'s crash-points scene teaches about a toy loop.
//!
//! A seeded plan picks visits of each crash point at which the worker dies
//! (as a SIGKILL would: everything in hand is dropped where it stands);
//! a new worker takes its place, and the dead one's leases run out and are
//! reclaimed. The model counts, per key, the requests that left (visits of
//! `AfterCount` that went on) and the crashes. At the end:
//!
//! - at most one provider effect per key, exactly one per action (the
//!   provider's log, read by the test and by the verifier);
//! - no request without a counted attempt: the provider's send lines of a
//!   key are at most the requests the model saw leave, which are at most
//!   the attempts the store counted;
//! - every resend follows a lookup the provider answered "not found";
//! - courier's final statuses are the provider's.
//!
//! The negative control runs the same plan with a worker whose lookups are
//! skipped (`Verdict::SkipLookup`); the same checks must fail. Its messages
//! carry no status callback: with webhooks on, a webhook could settle an
//! action whose worker crashed after its send before the lease ran out, and
//! then no reclaim (so no lookup to skip, no blind resend) would follow; one
//! fresh-machine run skipped lookups yet made no blind resend.
//! Without webhooks every send cut short by a crash (`AfterSend`,
//! `BeforeSettle`) is reclaimed and must be looked up, so the control's
//! blind resends are certain, not lucky.

mod common;

use common::{client_with_callback, start_api, verify, wait_all_final, worker, KEY, SECRET};
use courier_core::{action_key, Limits};
use courier_dispatch::failpoint::{Hit, Hook, Point, Verdict};
use courier_fake::{self as fake, FakeConfig};
use courier_provider::wire::{LogEntry, LogOp, LookupResult, SendResult};
use courier_store::PgStore;
use courier_testkit::{fixtures, fresh_db};
use courier_verify::Report;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SEED: u64 = 14;
const ACTIONS: usize = 60;
const STORES: usize = 6;
const WORKERS: usize = 2;
const CRASH_POINTS: [Point; 3] = [Point::AfterCount, Point::AfterSend, Point::BeforeSettle];

fn limits() -> Limits {
    Limits {
        lease_ttl_ms: 800,
        heartbeat_interval_ms: 200,
        send_margin_ms: 200,
        request_timeout_ms: 400,
        final_overdue_ms: 2_000,
        worker_concurrency_max: 8,
        ..common::limits()
    }
}

/// What the crash points saw of one key.
#[derive(Debug, Default)]
struct KeyModel {
    /// Requests that left (visits of `AfterCount` that went on).
    requests: u32,
    crashes: u32,
}

/// The seeded plan and the model, shared by every worker's hook.
struct Plan {
    /// Per point: the visits (1-based, counted over all workers) that crash.
    crash_at: HashMap<Point, BTreeSet<u32>>,
    visits: HashMap<Point, u32>,
    crashes: HashMap<Point, u32>,
    skip_lookups: bool,
    skipped: u32,
    keys: HashMap<String, KeyModel>,
}

impl Plan {
    fn new(seed: u64, skip_lookups: bool) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut crash_at = HashMap::new();
        // Every action visits each crash point at least once, so visits up
        // to ACTIONS are always reached: three crashes at each point.
        for p in CRASH_POINTS {
            let at: BTreeSet<u32> = (0..3)
                .map(|_| rng.random_range(1..=ACTIONS as u32))
                .collect();
            crash_at.insert(p, at);
        }
        // Lookups follow reclaims and unknown answers; crash at one if reached.
        crash_at.insert(
            Point::BeforeLookup,
            BTreeSet::from([rng.random_range(1..=4)]),
        );
        Plan {
            crash_at,
            visits: HashMap::new(),
            crashes: HashMap::new(),
            skip_lookups,
            skipped: 0,
            keys: HashMap::new(),
        }
    }

    fn decide(&mut self, hit: &Hit<'_>) -> Verdict {
        let visit = self.visits.entry(hit.point).or_default();
        *visit += 1;
        let crash = self.crash_at[&hit.point].contains(visit);
        let key = self.keys.entry(hit.key.to_string()).or_default();
        if crash {
            key.crashes += 1;
            *self.crashes.entry(hit.point).or_default() += 1;
            return Verdict::Crash;
        }
        match hit.point {
            Point::AfterCount => key.requests += 1,
            Point::BeforeLookup if self.skip_lookups => {
                self.skipped += 1;
                return Verdict::SkipLookup;
            }
            _ => {}
        }
        Verdict::Go
    }
}

/// What one run produced.
struct Outcome {
    report: Report,
    /// The model's own findings, one line each.
    violations: Vec<String>,
    crashes: HashMap<Point, u32>,
    skipped: u32,
}

async fn run_model(seed: u64, skip_lookups: bool) -> Outcome {
    let db = fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("provider.jsonl");
    let mut cfg = FakeConfig::new(&log, KEY, SECRET);
    cfg.seed = seed;
    cfg.timeout_hold_ms = 600;
    cfg.lookup_lag_ms = 50;
    let provider = fake::start(cfg).await.unwrap();
    let api = start_api(db.store.clone()).await;
    for store in 0..STORES {
        fixtures::enqueued(&db.store, &format!("s{store}"), ACTIONS / STORES).await;
    }
    let plan = Arc::new(Mutex::new(Plan::new(seed, skip_lookups)));
    let hook: Hook = {
        let plan = plan.clone();
        Arc::new(move |hit: &Hit<'_>| plan.lock().unwrap().decide(hit))
    };
    let stop = CancellationToken::new();
    let fleet = {
        let (store, stop) = (db.store.clone(), stop.clone());
        let url = provider.url();
        let callback = (!skip_lookups).then(|| format!("{api}/v1/webhooks/provider"));
        tokio::spawn(async move { run_fleet(&store, &url, callback, hook, stop).await })
    };
    wait_all_final(&db.store, ACTIONS as i64, Duration::from_secs(120)).await;
    stop.cancel();
    fleet.await.unwrap();
    provider.shutdown().await.unwrap();
    let report = verify(&db.store, &log).await;
    // Aborted deliveries of crashed workers may still hold the hook a
    // moment: take the model out rather than unwrap the Arc.
    let (keys, crashes, skipped) = {
        let mut p = plan.lock().unwrap();
        (std::mem::take(&mut p.keys), p.crashes.clone(), p.skipped)
    };
    let violations = check_model(&db.store, &log, &keys).await;
    let s = db.store.summary(1800).await.unwrap();
    eprintln!(
        "crashes {crashes:?}, lookups skipped {skipped}, events {:?}\n{}",
        s.events,
        report.table()
    );
    Outcome {
        report,
        violations,
        crashes,
        skipped,
    }
}

/// Keeps `WORKERS` workers running until `stop`: a worker that returns
/// before it was stopped crashed, and a new one (a new owner) replaces it.
async fn run_fleet(
    store: &PgStore,
    provider: &str,
    callback: Option<String>,
    hook: Hook,
    stop: CancellationToken,
) {
    let mut generation = 0u64;
    let start = |generation: &mut u64| {
        *generation += 1;
        let w = worker(
            store,
            client_with_callback(provider, callback.clone(), &limits()),
            limits(),
            &format!("m{generation}"),
        )
        .with_failpoints(hook.clone());
        let stop = stop.clone();
        tokio::spawn(async move { w.run(stop).await })
    };
    let mut slots: Vec<_> = (0..WORKERS).map(|_| start(&mut generation)).collect();
    while !stop.is_cancelled() {
        for slot in &mut slots {
            if slot.is_finished() && !stop.is_cancelled() {
                *slot = start(&mut generation);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = stop.cancelled() => {}
        }
    }
    for slot in slots {
        slot.await.unwrap();
    }
}

/// The model's checks against the provider's log and the store.
async fn check_model(store: &PgStore, log: &Path, keys: &HashMap<String, KeyModel>) -> Vec<String> {
    let mut out = Vec::new();
    let lines = per_key_log(log);
    for o in store.action_outcomes().await.unwrap() {
        let key = action_key(&o.uid);
        let view = store.action_get(o.action_id).await.unwrap().unwrap();
        let seen = keys.get(&key).map_or(0, |k| k.requests);
        let l = lines.get(&key).cloned().unwrap_or_default();
        if l.created > 1 || (o.state == "done" && l.created != 1) {
            out.push(format!("{key}: {} effects (state {})", l.created, o.state));
        }
        if l.sends > seen || i64::from(seen) > i64::from(view.attempts) {
            out.push(format!(
                "{key}: {} sends, {seen} requests seen leaving, {} attempts counted",
                l.sends, view.attempts
            ));
        }
        if l.resends_without_not_found > 0 {
            out.push(format!(
                "{key}: {} resends without a lookup answered not found",
                l.resends_without_not_found
            ));
        }
    }
    out
}

#[derive(Debug, Default, Clone)]
struct KeyLines {
    sends: u32,
    created: u32,
    resends_without_not_found: u32,
    not_found_since_send: bool,
}

fn per_key_log(log: &Path) -> HashMap<String, KeyLines> {
    let mut per_key: HashMap<String, KeyLines> = HashMap::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let entry: LogEntry = serde_json::from_str(line).unwrap();
        match entry.op {
            LogOp::Send {
                key: Some(key),
                result,
                ..
            } => {
                let k = per_key.entry(key).or_default();
                if k.sends > 0 && !k.not_found_since_send {
                    k.resends_without_not_found += 1;
                }
                k.sends += 1;
                k.created += u32::from(result == SendResult::Created);
                k.not_found_since_send = false;
            }
            LogOp::Lookup {
                key,
                result: LookupResult::NotFound,
                ..
            } => per_key.entry(key).or_default().not_found_since_send = true,
            _ => {}
        }
    }
    per_key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crashes_at_every_crash_point_leave_at_most_one_effect_per_key() {
    let o = run_model(SEED, false).await;
    assert!(o.report.passed(), "{}", o.report.table());
    assert!(o.violations.is_empty(), "{:#?}", o.violations);
    for p in CRASH_POINTS {
        assert!(
            o.crashes.get(&p).copied().unwrap_or(0) > 0,
            "no crash at {p:?}: {:?}",
            o.crashes
        );
    }
    assert_eq!(o.report.exactly_one, ACTIONS as u64, "{}", o.report.table());
    assert_eq!(o.skipped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_model_catches_a_worker_that_skips_the_lookup() {
    let o = run_model(SEED, true).await;
    assert!(o.skipped > 0, "the negative control never skipped a lookup");
    assert!(
        o.report.blind_resends.count > 0,
        "the verifier missed the blind resends: {}",
        o.report.table()
    );
    assert!(!o.report.passed());
    assert!(
        o.violations.iter().any(|v| v.contains("without a lookup")),
        "the model missed the blind resends: {:#?}",
        o.violations
    );
}
