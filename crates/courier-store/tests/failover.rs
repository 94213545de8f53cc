//! The pool through a failover, against real servers: private clusters of
//! this test (never the shared test cluster, whose settings other tests
//! rely on), set read-only with `ALTER SYSTEM SET
//! default_transaction_read_only = on` and a reload, stopped, or a streaming
//! standby promoted.
//!
//! Each guarantee has its negative control in the same test: the URL without
//! `target_session_attrs=read-write`, or the pool without its writable check
//! ([`RecycleCheck::Open`]), hands out a connection whose writes are refused
//! with 25006, and the test sees it.

use courier_core::Status;
use courier_store::cluster::StopMode;
use courier_store::{PgStore, RecycleCheck, SettleOutcome, SettleReq, StoreConfig, StoreError};
use courier_testkit::node::Node;
use std::time::{Duration, Instant};

fn url(hosts: &[String], read_write: bool) -> String {
    let attrs = if read_write {
        "?target_session_attrs=read-write"
    } else {
        ""
    };
    format!("postgres://postgres@{}/courier{attrs}", hosts.join(","))
}

async fn store(url: &str, check: RecycleCheck) -> Result<PgStore, StoreError> {
    let mut cfg = StoreConfig::new(url);
    cfg.migrate = false;
    cfg.pool_size_max = 4;
    cfg.connect_timeout = Duration::from_secs(2);
    cfg.recycle_check = check;
    PgStore::connect(&cfg).await
}

/// One write through the pool; the port of the server that took it.
async fn write(store: &PgStore) -> Result<i32, StoreError> {
    let c = store.client().await?;
    c.execute("INSERT INTO probe VALUES (1)", &[]).await?;
    Ok(c.query_one("SELECT inet_server_port()", &[]).await?.get(0))
}

/// Checks out every connection of the pool at once (so each is dialled),
/// returns them, and gives the ports they reached.
async fn fill_pool(store: &PgStore) -> Vec<i32> {
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(store.client().await.expect("a connection"));
    }
    let mut ports = Vec::new();
    for c in &held {
        ports.push(
            c.query_one("SELECT inet_server_port()", &[])
                .await
                .unwrap()
                .get(0),
        );
    }
    ports
}

fn dead_host() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("127.0.0.1:{port}")
}

fn is_read_only_refusal(e: &StoreError) -> bool {
    e.is_unavailable() && e.to_string().contains("25006")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_url_skips_a_dead_host_and_a_read_only_one() {
    let (a, b) = (Node::start().await, Node::start().await);
    for n in [&a, &b] {
        n.admin()
            .await
            .batch_execute("CREATE TABLE probe (x int)")
            .await
            .unwrap();
    }
    b.read_only(true).await;
    let hosts = [dead_host(), b.host(), a.host()];

    let s = store(&url(&hosts, true), RecycleCheck::Writable)
        .await
        .unwrap();
    assert_eq!(
        write(&s).await.unwrap(),
        i32::from(a.port),
        "the writable node"
    );

    // Negative control: without target_session_attrs the first host that
    // answers is taken, the read-only one, and the write is refused.
    let s = store(&url(&hosts, false), RecycleCheck::Writable)
        .await
        .unwrap();
    let e = write(&s).await.unwrap_err();
    assert!(is_read_only_refusal(&e), "{e}");

    // No writable node at all: a new connection fails, as unavailable.
    a.read_only(true).await;
    let s = store(&url(&hosts, true), RecycleCheck::Writable).await;
    assert!(
        s.as_ref().is_err_and(|e| e.is_unavailable()),
        "{:?}",
        s.err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_url_skips_a_frozen_host() {
    let (a, frozen) = (Node::start().await, Node::start().await);
    a.admin()
        .await
        .batch_execute("CREATE TABLE probe (x int)")
        .await
        .unwrap();
    frozen.freeze(true);
    let u = url(&[frozen.host(), a.host()], true);
    // The store config's connect time-out (2 s) per host.
    let t0 = Instant::now();
    let s = store(&u, RecycleCheck::Writable).await.unwrap();
    assert_eq!(write(&s).await.unwrap(), i32::from(a.port));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // Negative control: tokio-postgres's own multi-host connect, whose
    // time-out covers only the TCP connect, waits on the frozen host's
    // handshake and never tries the next.
    let (mut cfg, limit): (tokio_postgres::Config, _) =
        (u.parse().unwrap(), Duration::from_secs(2));
    cfg.connect_timeout(limit);
    let own = tokio::time::timeout(3 * limit, cfg.connect(tokio_postgres::NoTls)).await;
    assert!(
        own.is_err(),
        "tokio-postgres got past the frozen host by itself"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_drops_connections_to_a_node_turned_read_only() {
    let (a, b) = (Node::start().await, Node::start().await);
    for n in [&a, &b] {
        n.admin()
            .await
            .batch_execute("CREATE TABLE probe (x int)")
            .await
            .unwrap();
    }
    b.read_only(true).await;
    let u = url(&[a.host(), b.host()], true);
    let checked = store(&u, RecycleCheck::Writable).await.unwrap();
    let unchecked = store(&u, RecycleCheck::Open).await.unwrap();
    let on_a = vec![i32::from(a.port); 4];
    assert_eq!(fill_pool(&checked).await, on_a);
    assert_eq!(fill_pool(&unchecked).await, on_a);

    // a is demoted, b takes writes.
    a.read_only(true).await;
    b.read_only(false).await;
    for _ in 0..8 {
        assert_eq!(write(&checked).await.unwrap(), i32::from(b.port));
    }
    // Negative control: the pool that only checks that a connection is open
    // hands out a's connections, and their writes are refused.
    let e = write(&unchecked).await.unwrap_err();
    assert!(is_read_only_refusal(&e), "{e}");

    // No node takes writes: a checkout fails, as unavailable (the caller
    // pauses and retries), and writes come back with a writable node.
    b.read_only(true).await;
    let e = write(&checked).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    a.read_only(false).await;
    assert_eq!(write(&checked).await.unwrap(), i32::from(a.port));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_follows_a_promoted_standby() {
    let a = Node::start().await;
    a.admin()
        .await
        .batch_execute("CREATE TABLE probe (x int)")
        .await
        .unwrap();
    let b = Node::standby_of(&a).await;
    let u = url(&[a.host(), b.host()], true);
    let s = store(&u, RecycleCheck::Writable).await.unwrap();
    assert_eq!(fill_pool(&s).await, vec![i32::from(a.port); 4]);
    assert_eq!(write(&s).await.unwrap(), i32::from(a.port));
    let before = streaming(&s).await;
    assert_eq!(
        (before.node.as_str(), before.primary),
        (a.host().as_str(), true)
    );
    let st = &before.standbys[0];
    assert_eq!(
        (st.state.as_str(), st.sync_state.as_str()),
        ("streaming", "async")
    );
    assert!(st.replay_behind_bytes.is_some_and(|b| b >= 0), "{st:?}");
    assert_eq!(st.addr.as_deref(), Some("127.0.0.1"));

    a.cluster.stop(StopMode::Fast).expect("stop the primary");
    // Before the promotion no node takes writes: the pool refuses to hand
    // out a connection rather than give the standby's.
    let e = write(&s).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    // Negative control: without target_session_attrs the standby is taken,
    // and refuses the write.
    let any = store(&url(&[a.host(), b.host()], false), RecycleCheck::Writable)
        .await
        .unwrap();
    let e = write(&any).await.unwrap_err();
    assert!(is_read_only_refusal(&e), "{e}");

    let promoted: bool = b
        .admin()
        .await
        .query_one("SELECT pg_promote(true, 30)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(promoted);
    assert_eq!(write(&s).await.unwrap(), i32::from(b.port));
    // The status names the new primary, on a new timeline, with no standby.
    let after = s.replication().await.unwrap();
    assert_eq!(
        (after.node.as_str(), after.primary),
        (b.host().as_str(), true)
    );
    assert!(
        after.timeline > before.timeline,
        "{before:?} then {after:?}"
    );
    assert!(after.standbys.is_empty(), "{after:?}");
    // The write made before the failover is on the promoted node.
    let rows: i64 = b
        .admin()
        .await
        .query_one("SELECT count(*) FROM probe", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 2);
}

/// The replication view once the standby streams and has reported what it
/// replayed (it connects shortly after it starts).
async fn streaming(s: &PgStore) -> courier_store::Replication {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = s.replication().await.expect("the replication view");
        if r.standbys
            .iter()
            .any(|st| st.state == "streaming" && st.replay_behind_bytes.is_some())
        {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never streamed: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A commit waiting for a synchronous standby is committed locally; when
/// the node is shut down under it (what a failover manager does to a demoted
/// primary) the client sees a broken connection: a lost commit answer for a
/// write that happened. Here every commit waits (`synchronous_standby_names`
/// names a standby that never comes), the waiting backends are terminated,
/// and the retries of a settle and a fail recognise their own earlier writes
/// (the worker takes a fail refused at its own epoch as its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_whose_sync_wait_was_cut_are_recognised_on_retry() {
    let n = Node::start().await;
    let s = PgStore::connect(&StoreConfig::new(n.url())).await.unwrap();
    courier_testkit::fixtures::enqueued(&s, "s0", 2).await;
    let (to_settle, to_fail) = (
        courier_testkit::fixtures::sent(&s).await,
        courier_testkit::fixtures::sent(&s).await,
    );
    let admin = n.admin().await;
    admin
        .batch_execute("CREATE TABLE probe (x int)")
        .await
        .unwrap();
    sync_standby_names(&admin, "'nobody'").await;
    commits_wait(&n).await;
    let req = SettleReq {
        lease: to_settle.lease.clone(),
        report: Status::Accepted,
        message_id: Some("m-1".into()),
        from_lookup: false,
    };
    let settling = {
        let (s, req) = (s.clone(), req.clone());
        tokio::spawn(async move { s.actions_settle(&[req], 60_000).await })
    };
    let failing = {
        let (s, lease) = (s.clone(), to_fail.lease.clone());
        tokio::spawn(async move { s.action_fail(&lease, 400, "rejected").await })
    };
    // The two writes, and the probe of `commits_wait`.
    sync_waiters(&admin, 3).await;
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        )
        .await
        .unwrap();
    let settled = settling.await.unwrap();
    assert!(
        settled.as_ref().is_err_and(|e| e.is_unavailable()),
        "{settled:?}"
    );
    let failed = failing.await.unwrap();
    assert!(
        failed.as_ref().is_err_and(|e| e.is_unavailable()),
        "{failed:?}"
    );
    // Committed locally all the same.
    let states: Vec<String> = admin
        .query("SELECT state FROM actions ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(states, ["dispatched", "failed"]);

    sync_standby_names(&admin, "''").await;
    let again = s
        .actions_settle(&[req], 60_000)
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    assert!(matches!(again, SettleOutcome::Settled(_)), "{again:?}");
    let again = s
        .action_fail(&to_fail.lease, 400, "rejected")
        .await
        .unwrap();
    assert_eq!(again.unwrap_err().current_epoch, Some(to_fail.lease.epoch));
}

async fn sync_standby_names(admin: &tokio_postgres::Client, value: &str) {
    admin
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = {value}"
        ))
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
}

/// Waits until a commit on the node waits for the synchronous standby (the
/// checkpointer applies the reload on its own time): a probe commit that
/// has not answered after 100 ms is waiting, and is left waiting.
async fn commits_wait(n: &Node) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let probe = n.admin().await;
        // A commit waits only when its transaction wrote WAL.
        let commit = probe.batch_execute("INSERT INTO probe VALUES (1)");
        if tokio::time::timeout(Duration::from_millis(100), commit)
            .await
            .is_err()
        {
            // Keep the session (and its waiting commit) open.
            tokio::spawn(async move {
                let _keep = probe;
                std::future::pending::<()>().await
            });
            return;
        }
        assert!(
            Instant::now() < deadline,
            "commits never waited for the standby"
        );
    }
}

/// Waits until `n` sessions wait for the synchronous standby.
async fn sync_waiters(admin: &tokio_postgres::Client, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == n {
            return;
        }
        assert!(Instant::now() < deadline, "{waiting} commits wait, not {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
