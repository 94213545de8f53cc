//! Live courier processes for the hostile-input and dashboard tests: a fresh
//! database in the shared test PostgreSQL cluster (the one courier-testkit
//! uses, found and started the same way, under the same file lock), and the
//! `courier` binary's `serve`, `provider` and
//! `worker` subcommands as child processes, killed on drop.
//!
//! Use it with `#[path = "hostile/live.rs"] mod live;`.
//!
//! # Invariants
//! - Every wait has a deadline; the "listening on" line of a child is awaited,
//!   never slept for.
//! - Children are killed and reaped on drop, so a failing test leaves no
//!   process behind.

#![allow(dead_code)] // Each test uses a different part.

use courier_store::{PgStore, StoreConfig};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a child has to say where it listens.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The shared test cluster's directory, as courier-testkit names it:
/// `COURIER_TEST_PG_DIR`, or a directory under /tmp named after the hash of
/// the testkit crate's path in this checkout.
fn cluster_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("COURIER_TEST_PG_DIR") {
        return PathBuf::from(dir);
    }
    use std::hash::{Hash, Hasher};
    // CARGO_MANIFEST_DIR is crates/courier-cli; testkit's is its sibling.
    let testkit = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .with_file_name("courier-testkit")
        .to_string_lossy()
        .into_owned();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    testkit.as_str().hash(&mut h);
    std::env::temp_dir().join(format!("courier-test-pg-{:016x}", h.finish()))
}

/// The URL of the shared test server's maintenance database.
fn server_url() -> String {
    if let Ok(url) = std::env::var("COURIER_TEST_DATABASE_URL") {
        return url;
    }
    let dir = cluster_dir();
    std::fs::create_dir_all(&dir).expect("create the test cluster directory");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.with_extension("lock"))
        .expect("open the test cluster lock");
    let _guard = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock the test cluster");
    let url = courier_store::cluster::Cluster::new(&dir)
        .setting("fsync", "off")
        .setting("synchronous_commit", "off")
        .start()
        .unwrap_or_else(|e| panic!("cannot start the test PostgreSQL cluster: {e}"));
    url.replace(
        &format!("/{}", courier_store::cluster::DATABASE),
        "/postgres",
    )
}

/// A fresh, migrated database: its URL and a store on it.
pub async fn fresh_db(tag: &str) -> (String, PgStore) {
    let server = tokio::task::spawn_blocking(server_url)
        .await
        .expect("start the test cluster");
    let name = format!(
        "h_{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    );
    let url = courier_store::database_recreate(&server, &name)
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    let store = PgStore::connect(&StoreConfig::new(&url))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    (url, store)
}

/// Rows of every courier table, and every action's state and epoch: what a
/// refused request must leave as it was.
pub async fn db_state(store: &PgStore) -> String {
    let client = store.client().await.expect("a connection");
    let counts = client
        .query_one(
            "SELECT (SELECT count(*) FROM stores), (SELECT count(*) FROM actions),
                    (SELECT count(*) FROM outbox), (SELECT count(*) FROM webhook_events),
                    (SELECT count(*) FROM events)",
            &[],
        )
        .await
        .expect("count rows");
    let mut out = format!(
        "stores {} actions {} outbox {} webhook_events {} events {}",
        counts.get::<_, i64>(0),
        counts.get::<_, i64>(1),
        counts.get::<_, i64>(2),
        counts.get::<_, i64>(3),
        counts.get::<_, i64>(4)
    );
    for r in client
        .query(
            "SELECT a.id, a.state, a.epoch, coalesce(o.status, '-') || ' '
                    || coalesce(a.redriven_as::text, '-') FROM actions a
             LEFT JOIN outbox o ON o.action_id = a.id ORDER BY a.id",
            &[],
        )
        .await
        .expect("list actions")
    {
        out.push_str(&format!(
            "; {} {} {} {}",
            r.get::<_, i64>(0),
            r.get::<_, String>(1),
            r.get::<_, i64>(2),
            r.get::<_, String>(3)
        ));
    }
    out
}

/// A running child of the `courier` binary.
pub struct Service {
    pub name: String,
    pub child: Child,
    /// `http://HOST:PORT`, from its "listening on" line (empty for workers).
    pub url: String,
    /// Lines its stderr printed (read by a thread).
    pub stderr: mpsc::Receiver<String>,
}

impl Service {
    /// Starts `courier <args>` and waits for its `listening on http://...`
    /// line on stdout (or, with `listens = false`, returns at once).
    pub fn start(name: &str, args: &[&str], listens: bool) -> Service {
        let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start courier {name}: {e}"));
        let (err_tx, err_rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if err_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on ") {
                    let _ = tx.send(line[i + "listening on ".len()..].trim().to_string());
                }
            }
        });
        let mut s = Service {
            name: name.to_string(),
            child,
            url: String::new(),
            stderr: err_rx,
        };
        if listens {
            match rx.recv_timeout(START_TIMEOUT) {
                Ok(url) => s.url = url,
                Err(_) => {
                    let _ = s.child.kill();
                    let errors: Vec<String> = s.stderr.try_iter().collect();
                    panic!(
                        "courier {name} did not say where it listens within {START_TIMEOUT:?}: {}",
                        errors.join("\n")
                    );
                }
            }
        }
        s
    }

    /// The address part of the URL.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.url
            .trim_start_matches("http://")
            .parse()
            .expect("a socket address")
    }

    /// Panics (with its stderr) if the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("wait on the child") {
            let errors: Vec<String> = self.stderr.try_iter().collect();
            panic!(
                "courier {} exited ({status}): {}",
                self.name,
                errors.join("\n")
            );
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
