//! The cluster rig against real servers: 3 etcd members and 3 nats-servers
//! (the one scripts/install-nats.sh installs), their leaders found, killed,
//! stopped and brought back, each signal confirmed.

use courier_relay::broker::{Broker, Names};
use courier_relay::cluster::{Cluster, ClusterBinaries};
use courier_relay::model::Keys;
use courier_relay::RelayLimits;
use std::time::{Duration, Instant};

async fn until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "{what} not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_are_found_killed_and_replaced_and_a_stopped_server_comes_back() {
    let ready = Duration::from_secs(30);
    let mut c = Cluster::start(&ClusterBinaries::default(), ready)
        .await
        .expect("the cluster starts (scripts/install-nats.sh installs its nats-server)");
    assert!(c.nats_version.contains("v2.1"), "{}", c.nats_version);
    assert!(c.is_whole());

    // etcd: the leader dies, another member leads, the old one rejoins.
    let leader = until("an etcd leader", ready, || c.etcd_leader()).await;
    let status = c.etcd[leader].kill().await.expect("SIGKILL confirmed");
    assert!(status.contains("9"), "{status}");
    assert!(!c.is_whole());
    let next = until("a new etcd leader", ready, || c.etcd_leader()).await;
    assert_ne!(next, leader);
    c.etcd[leader]
        .restart(ready)
        .await
        .expect("the member rejoins");

    // JetStream: a stream at replicas 3 on every server; the meta leader and
    // the stream leader are named, and the stream leader moves when its
    // server is frozen past an election.
    let keys = Keys::new("rig-test").unwrap();
    let limits = RelayLimits {
        stream_replicas: 3,
        ..RelayLimits::default()
    };
    let broker = Broker::connect(&c.nats_url_list(), Names::new(&keys), &limits)
        .await
        .expect("connects to the cluster");
    // As `relay run` does: a just-started cluster may not see a peer yet
    // ("no suitable peers for placement"), so retry up to the ready time.
    until("the stream and its consumer", ready, || async {
        broker.ensure(&limits).await.ok()
    })
    .await;
    let meta = until("a meta leader", ready, || c.meta_leader()).await;
    assert!(meta < 3);
    let stream_leader = until("a stream leader", ready, || async {
        let name = broker.stream_leader().await.ok()?.0?;
        c.nats_index(&name)
    })
    .await;
    let stopped = c.nats[stream_leader]
        .stop()
        .await
        .expect("SIGSTOP confirmed");
    assert!(stopped.contains("SIGSTOP"), "{stopped}");
    let moved = until("a new stream leader", Duration::from_secs(60), || async {
        let name = broker.stream_leader().await.ok()?.0?;
        c.nats_index(&name).filter(|i| *i != stream_leader)
    })
    .await;
    assert_ne!(moved, stream_leader);
    // The live servers' monitoring endpoints name the same new leader
    // (what the run reads while a server is stopped).
    let names = Names::new(&keys);
    let seen = until("the new leader in /jsz", ready, || async {
        c.stream_leader_seen(&names.stream)
            .await
            .filter(|i| *i != stream_leader)
    })
    .await;
    assert_eq!(seen, moved);
    let resumed = c.nats[stream_leader]
        .cont(ready)
        .await
        .expect("SIGCONT confirmed");
    assert!(resumed.contains("Continued"), "{resumed}");
    assert!(c.is_whole());
}

#[tokio::test]
async fn a_missing_nats_server_names_the_install_script() {
    let bins = ClusterBinaries {
        nats_server: "/nonexistent/nats-server".into(),
        ..ClusterBinaries::default()
    };
    let err = Cluster::start(&bins, Duration::from_secs(5))
        .await
        .err()
        .expect("no cluster without its nats-server")
        .to_string();
    assert!(err.contains("scripts/install-nats.sh"), "{err}");
    assert!(err.contains("/nonexistent/nats-server"), "{err}");
}
