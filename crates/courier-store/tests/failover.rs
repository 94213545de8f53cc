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

use courier_store::cluster::{find_binary, Cluster, StopMode};
use courier_store::{PgStore, RecycleCheck, StoreConfig, StoreError};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// A private cluster, stopped when dropped.
struct Node {
    cluster: Cluster,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Node {
    /// Starts a cluster (its start runs a runtime of its own, so off ours).
    async fn start() -> Node {
        tokio::task::spawn_blocking(Node::start_blocking)
            .await
            .expect("start a private cluster")
    }

    async fn standby_of(primary: &Node) -> Node {
        let port = primary.port;
        tokio::task::spawn_blocking(move || Node::standby_blocking(port))
            .await
            .expect("start a standby")
    }

    fn start_blocking() -> Node {
        let dir = node_dir();
        let cluster = Cluster::new(dir.path());
        let url = cluster.start().expect("start a private cluster");
        Node::started(cluster, &url, dir)
    }

    fn started(cluster: Cluster, url: &str, dir: tempfile::TempDir) -> Node {
        let port = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("a port in the cluster's URL");
        Node {
            cluster,
            port,
            _dir: dir,
        }
    }

    /// A streaming standby of the primary on `port`: a base backup with `-R`, started.
    fn standby_blocking(port: u16) -> Node {
        let dir = node_dir();
        let data = dir.path().join("data");
        let pg_basebackup = find_binary("pg_basebackup").expect("pg_basebackup");
        let mut cmd = std::process::Command::new(pg_basebackup);
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args([
                "-U",
                "postgres",
                "-X",
                "stream",
                "-R",
                "--checkpoint=fast",
                "-D",
            ])
            .arg(&data);
        as_postgres(&mut cmd, dir.path());
        let out = cmd.output().expect("run pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster::new(dir.path());
        let url = cluster.start().expect("start the standby");
        Node::started(cluster, &url, dir)
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn admin(&self) -> tokio_postgres::Client {
        let url = format!("postgres://postgres@{}/courier", self.host());
        let (c, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
        tokio::spawn(conn);
        // The admin session writes whatever the server's default says.
        c.batch_execute("SET default_transaction_read_only = off")
            .await
            .expect("a writable session");
        c
    }

    /// Sets the whole server read-only (or back), for every session, and
    /// waits until a new session sees it.
    async fn read_only(&self, on: bool) {
        let c = self.admin().await;
        let value = if on { "on" } else { "off" };
        c.batch_execute(&format!(
            "ALTER SYSTEM SET default_transaction_read_only = {value}"
        ))
        .await
        .expect("alter system");
        c.batch_execute("SELECT pg_reload_conf()")
            .await
            .expect("reload");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let url = format!("postgres://postgres@{}/courier", self.host());
            let (fresh, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
            tokio::spawn(conn);
            let row = fresh
                .query_one("SHOW transaction_read_only", &[])
                .await
                .expect("show");
            if row.get::<_, String>(0) == value {
                break;
            }
            assert!(Instant::now() < deadline, "the reload did not take");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Every backend got the reload signal with the new session's; an
        // idle one applies it before its next command.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.cluster.stop(StopMode::Immediate);
    }
}

fn node_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("courier-failover-")
        .tempdir_in("/tmp")
        .expect("a directory")
}

/// Runs `cmd` as the user that runs PostgreSQL when we are root, in `dir`,
/// which that user is made to own.
fn as_postgres(cmd: &mut std::process::Command, dir: &Path) {
    if !nix::unistd::Uid::effective().is_root() {
        return;
    }
    let user = nix::unistd::User::from_name("postgres")
        .expect("look the postgres user up")
        .expect("a postgres user");
    nix::unistd::chown(dir, Some(user.uid), Some(user.gid)).expect("chown");
    cmd.uid(user.uid.as_raw())
        .gid(user.gid.as_raw())
        .current_dir(dir)
        .env("HOME", dir);
}

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
