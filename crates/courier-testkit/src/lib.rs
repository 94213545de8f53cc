//! Test support. `fresh_db()` gives each test its own database in a real
//! PostgreSQL cluster that the test run starts itself: the cluster lives under
//! [`cluster_dir`], is started on first
//! use by whichever test process comes first (under a file lock), and is
//! shared by the rest of the run; the test script stops it at the end.
//! `COURIER_TEST_DATABASE_URL` points the tests at an existing server instead.
//!
//! [`fixtures`] builds actions in the states tests start from (`claimed()`,
//! `sent()`, `settled()`, `expire_lease()`), through the store's own API.
//! [`node`] starts private clusters for tests that stop a server, set it
//! read-only or promote a standby.

pub mod fixtures;
pub mod node;

use courier_store::cluster::Cluster;
use courier_store::{Clock, PgStore, StoreConfig};
use std::path::PathBuf;

/// The directory of the shared test cluster: `COURIER_TEST_PG_DIR`, or a
/// directory under /tmp named after this checkout. It is not inside the
/// checkout because PostgreSQL runs as the unprivileged `postgres` user when
/// the tests run as root, and a checkout under a private home directory is
/// not reachable by that user.
pub fn cluster_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("COURIER_TEST_PG_DIR") {
        return PathBuf::from(dir);
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_MANIFEST_DIR").hash(&mut h);
    std::env::temp_dir().join(format!("courier-test-pg-{:016x}", h.finish()))
}

/// The URL of the server's maintenance database (`postgres`).
fn server_url() -> String {
    if let Ok(url) = std::env::var("COURIER_TEST_DATABASE_URL") {
        return url;
    }
    let dir = cluster_dir();
    std::fs::create_dir_all(&dir).expect("create the test cluster directory");
    let lock_path = dir.with_extension("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .expect("open the test cluster lock");
    let _guard = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock the test cluster");
    let url = Cluster::new(&dir)
        .setting("fsync", "off")
        .setting("synchronous_commit", "off")
        .start()
        .unwrap_or_else(|e| panic!("cannot start the test PostgreSQL cluster: {e}"));
    url.replace(
        &format!("/{}", courier_store::cluster::DATABASE),
        "/postgres",
    )
}

/// A fresh, migrated database for one test.
pub struct TestDb {
    pub url: String,
    pub store: PgStore,
}

impl TestDb {
    /// The store with its lease statements on a manual clock, started at
    /// the database's time: move the clock ([`fixtures::expire_lease`],
    /// [`Clock::advance`]) instead of sleeping until a lease runs out.
    pub async fn manual_clock(&self) -> (PgStore, Clock) {
        let client = self.store.client().await.expect("a connection");
        let now = client
            .query_one("SELECT now()", &[])
            .await
            .expect("the database's time")
            .get(0);
        let clock = Clock::manual(now);
        (self.store.with_clock(clock.clone()), clock)
    }

    /// A connection of its own, outside the store's pool: for what needs
    /// `&mut` (`migrate::run`, transactions) or session settings.
    pub async fn raw_client(&self) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        c
    }

    /// The store over a single connection: a test that counts a table's
    /// updates in the cumulative statistics runs its steps through it, then
    /// [`TestDb::updates_of`] has that one backend send its counts at once
    /// (a backend sends them when it goes idle, at most once a second).
    pub async fn one_connection(&self) -> PgStore {
        let mut cfg = StoreConfig::new(&self.url);
        cfg.pool_size_max = 1;
        cfg.migrate = false;
        PgStore::connect(&cfg).await.expect("connect")
    }

    /// `table`'s (updates, HOT updates) in the cumulative statistics, after
    /// `one` (from [`TestDb::one_connection`]) sent its counts.
    pub async fn updates_of(&self, one: &PgStore, table: &str) -> (i64, i64) {
        let r = self
            .table_stats(
                one,
                table,
                "coalesce(n_tup_upd, 0), coalesce(n_tup_hot_upd, 0)",
            )
            .await;
        (r.get(0), r.get(1))
    }

    /// `table`'s sequential scans so far, likewise.
    pub async fn seq_scans_of(&self, one: &PgStore, table: &str) -> i64 {
        self.table_stats(one, table, "coalesce(seq_scan, 0)")
            .await
            .get(0)
    }

    async fn table_stats(&self, one: &PgStore, table: &str, columns: &str) -> tokio_postgres::Row {
        let c = one.client().await.expect("the one connection");
        // Sent when this statement's transaction ends, before its answer.
        c.batch_execute("SELECT pg_stat_force_next_flush()")
            .await
            .expect("flush the statistics");
        c.query_one(
            &format!("SELECT {columns} FROM pg_stat_user_tables WHERE relname = $1"),
            &[&table],
        )
        .await
        .expect("the table's statistics")
    }
}

pub async fn fresh_db() -> TestDb {
    let server = tokio::task::spawn_blocking(server_url)
        .await
        .expect("start the test cluster");
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let (client, conn) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create the test database");
    let url = match server.rfind('/') {
        Some(i) => format!("{}/{name}", &server[..i]),
        None => panic!("unexpected server URL {server}"),
    };
    let mut cfg = StoreConfig::new(&url);
    cfg.pool_size_max = 16;
    let store = PgStore::connect(&cfg)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    TestDb { url, store }
}

/// Runs `sql` under `EXPLAIN (ANALYZE, BUFFERS)`: the shared buffers its top
/// plan node touched (hit, which a test's small tables always are) and the
/// plan, for the message. Buffers do not depend on the machine's load, so a
/// test can compare two forms of a statement by them.
pub async fn explain_buffers(c: &tokio_postgres::Client, sql: &str) -> (u64, String) {
    let plan: Vec<String> = c
        .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), &[])
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let top = plan
        .iter()
        .find_map(|l| l.trim().strip_prefix("Buffers: shared hit="))
        .and_then(|v| v.split(|ch: char| !ch.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (top, plan.join("\n"))
}
