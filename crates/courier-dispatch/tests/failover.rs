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
