//! A worker that cannot reach a writable node keeps its actions unsent: it
//! never sends on a lease it cannot renew. The database is a private cluster
//! (a real server, no fake) set read-only for every session (`ALTER SYSTEM
//! SET default_transaction_read_only = on` and a reload, what a demoted
//! primary or a standby answers: 25006) for three lease times, while the
//! worker is between an unknown send and the next one.
//!
//! The checker: no request may leave between the moment writes stop and the
//! moment they come back. Its negative control is the broken resend mode
//! `UnsafeResend::NoLookup`, whose resends do not go through the fenced
//! count: the same run sends in the read-only window, and the checker
//! catches it.

mod common;

use common::{limits, wait_all_final, worker};
use courier_core::{Limits, Status};
use courier_dispatch::broken::{UnsafeProvider, UnsafeResend};
use courier_dispatch::worker::Provider;
use courier_provider::wire::MessageView;
use courier_provider::{LookupOutcome, SendOutcome};
use courier_store::{PgStore, StoreConfig};
use courier_testkit::fixtures;
use courier_testkit::node::Node;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A provider whose first send waits until the test lets it go and then
/// answers "unknown"; later sends are accepted as delivered. Lookups find nothing, so a
/// second send is due. It records when each request arrived.
#[derive(Clone, Default)]
struct FirstSendHangs {
    sends: Arc<Mutex<Vec<Instant>>>,
    arrived: Arc<Notify>,
    release: Arc<Notify>,
}

impl Provider for FirstSendHangs {
    async fn send(&self, key: &str, _to: &str, _body: &str) -> SendOutcome {
        let first = {
            let mut s = self.sends.lock().unwrap();
            s.push(Instant::now());
            s.len() == 1
        };
        if first {
            self.arrived.notify_one();
            self.release.notified().await;
            return SendOutcome::Unknown("time-out (scripted)".into());
        }
        SendOutcome::Accepted(MessageView {
            id: format!("m-{key}"),
            key: key.to_string(),
            status: Status::Delivered,
            updated_at: None,
        })
    }

    async fn lookup(&self, _key: &str) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// What one run saw: the requests' arrival times and the read-only window.
struct Run {
    sends: Vec<Instant>,
    read_only_from: Instant,
    writable_from: Instant,
    store_retries: u64,
    settled: u64,
}

impl Run {
    /// Requests that left while no node took writes.
    fn sends_while_read_only(&self) -> usize {
        self.sends
            .iter()
            .filter(|t| **t > self.read_only_from && **t < self.writable_from)
            .count()
    }
}

fn lease_limits() -> Limits {
    Limits {
        lease_ttl_ms: 800,
        heartbeat_interval_ms: 200,
        send_margin_ms: 200,
        ..limits()
    }
}

async fn run_through_read_only<P: Provider>(wrap: impl FnOnce(FirstSendHangs) -> P) -> Run {
    let node = Node::start().await;
    let mut cfg = StoreConfig::new(node.url());
    cfg.connect_timeout = Duration::from_secs(1);
    let store = PgStore::connect(&cfg).await.expect("connect and migrate");
    fixtures::enqueued(&store, "s0", 1).await;
    let provider = FirstSendHangs::default();
    let l = lease_limits();
    let w = worker(&store, wrap(provider.clone()), l.clone(), "w");
    let stop = CancellationToken::new();
    let running = {
        let stop = stop.clone();
        tokio::spawn(async move {
            w.run(stop).await;
            w
        })
    };
    provider.arrived.notified().await;
    node.read_only(true).await;
    let read_only_from = Instant::now();
    provider.release.notify_one();
    // Writes stay refused for three lease times: the worker's lease runs
    // out, in the database and by its own clock. (A real wait: the lease
    // is measured by the database's clock, which a test cannot move.)
    tokio::time::sleep(Duration::from_millis(3 * l.lease_ttl_ms)).await;
    let writable_from = Instant::now();
    node.read_only(false).await;
    wait_all_final(&store, 1, Duration::from_secs(30)).await;
    stop.cancel();
    let w = running.await.expect("the worker");
    let stats = w.stats();
    let sends = provider.sends.lock().unwrap().clone();
    Run {
        sends,
        read_only_from,
        writable_from,
        store_retries: stats
            .store_retries
            .load(std::sync::atomic::Ordering::Relaxed),
        settled: stats.settled.load(std::sync::atomic::Ordering::Relaxed),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_sends_nothing_while_no_node_takes_writes() {
    let run = run_through_read_only(|p| p).await;
    assert_eq!(
        run.sends_while_read_only(),
        0,
        "a request left while writes were refused"
    );
    assert!(run.store_retries > 0, "the worker never met the refusal");
    // The second request left once writes were back (a counted attempt
    // on a renewed lease or a reclaim), and the action was settled once.
    assert_eq!(run.sends.len(), 2);
    assert!(run.sends[1] > run.writable_from);
    assert_eq!(run.settled, 1);
}

/// Negative control: resends that skip the fenced count leave while the
/// database refuses every write, and the checker sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_read_only_check_catches_resends_without_a_counted_attempt() {
    let run = run_through_read_only(|p| UnsafeProvider::new(p, UnsafeResend::NoLookup, 1)).await;
    assert!(
        run.sends_while_read_only() > 0,
        "the checker missed the blind resend"
    );
}

/// A provider that accepts every message at once and remembers how many
/// requests each key got; a lookup finds a key it has.
#[derive(Clone, Default)]
struct Remembers {
    sends: Arc<Mutex<HashMap<String, u32>>>,
}

impl Provider for Remembers {
    async fn send(&self, key: &str, _to: &str, _body: &str) -> SendOutcome {
        let n = {
            let mut s = self.sends.lock().unwrap();
            let n = s.entry(key.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        let view = delivered(key);
        if n == 1 {
            SendOutcome::Accepted(view)
        } else {
            SendOutcome::Replayed(view)
        }
    }

    async fn lookup(&self, key: &str) -> LookupOutcome {
        if self.sends.lock().unwrap().contains_key(key) {
            LookupOutcome::Found(delivered(key))
        } else {
            LookupOutcome::NotFound
        }
    }
}

fn delivered(key: &str) -> MessageView {
    MessageView {
        id: format!("m-{key}"),
        key: key.to_string(),
        status: Status::Delivered,
        updated_at: None,
    }
}

/// The primary freezes (SIGSTOP of every process: its sockets stay open and
/// nothing answers), its streaming standby is promoted, and the worker,
/// reaching the database through `a,b` with `target_session_attrs=read-write`,
/// finishes the new actions on the promoted node while the old one is still
/// frozen: its store calls on the frozen node are given up after a lease
/// time and the pool's check drops those connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_moves_off_a_frozen_primary_to_the_promoted_standby() {
    let a = Node::start().await;
    let on_a = PgStore::connect(&StoreConfig::new(a.url()))
        .await
        .expect("connect and migrate");
    let b = Node::standby_of(&a).await;
    let mut cfg = StoreConfig::new(format!(
        "postgres://postgres@{},{}/courier?target_session_attrs=read-write",
        a.host(),
        b.host()
    ));
    cfg.migrate = false;
    cfg.connect_timeout = Duration::from_secs(1);
    let store = PgStore::connect(&cfg).await.expect("connect");
    let provider = Remembers::default();
    let w = worker(&store, provider.clone(), lease_limits(), "w");
    let stop = CancellationToken::new();
    let running = {
        let stop = stop.clone();
        tokio::spawn(async move { w.run(stop).await })
    };
    fixtures::enqueued(&on_a, "before", 10).await;
    wait_all_final(&on_a, 10, Duration::from_secs(30)).await;
    // Replication here is asynchronous: let the standby replay everything
    // first, so that what this test checks is the worker, not a lost tail.
    caught_up(&on_a).await;

    let stuck = on_a.client().await.expect("a connection to the primary");
    a.freeze(true);
    let promoted: bool = b
        .admin()
        .await
        .query_one("SELECT pg_promote(true, 30)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(promoted);
    let on_b = PgStore::connect(&StoreConfig {
        migrate: false,
        ..StoreConfig::new(b.url())
    })
    .await
    .expect("connect to the promoted node");
    fixtures::enqueued(&on_b, "after", 10).await;
    wait_all_final(&on_b, 20, Duration::from_secs(60)).await;
    // Control: the frozen node really holds an unbounded call.
    let held = tokio::time::timeout(Duration::from_secs(2), stuck.query_one("SELECT 1", &[])).await;
    assert!(held.is_err(), "the frozen primary answered");
    stop.cancel();
    running.await.expect("the worker");
    let sends = provider.sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 20, "{sends:?}");
    assert!(
        sends.values().all(|n| *n == 1),
        "a key was sent twice: {sends:?}"
    );
}

/// Waits until every standby of the store's node has replayed all of its WAL.
async fn caught_up(store: &PgStore) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = store.replication().await.expect("the replication view");
        if !r.standbys.is_empty() && r.standbys.iter().all(|s| s.replay_behind_bytes == Some(0)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not catch up: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
