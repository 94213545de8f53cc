//! Private PostgreSQL clusters for the tests that change a server's
//! settings or stop it (failover tests), never the shared test cluster whose
//! settings other tests rely on: [`Node::start`] (initdb and start in a
//! temporary directory), [`Node::standby_of`] (a streaming standby from a
//! base backup), [`Node::read_only`] (`ALTER SYSTEM SET
//! default_transaction_read_only` and a reload: every write of every
//! session is then refused with 25006, as on a standby), [`Node::freeze`]
//! (SIGSTOP of every process of the server). A node is thawed and stopped
//! (immediate) when dropped.

use courier_store::cluster::{find_binary, Cluster, StopMode};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// A private cluster, stopped when dropped.
pub struct Node {
    pub cluster: Cluster,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Node {
    /// Starts a cluster (its start runs a runtime of its own, so off ours).
    pub async fn start() -> Node {
        tokio::task::spawn_blocking(Node::start_blocking)
            .await
            .expect("start a private cluster")
    }

    pub async fn standby_of(primary: &Node) -> Node {
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

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The URL of the node's courier database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}/courier", self.host())
    }

    /// A session on the node's courier database that may write whatever
    /// the server's default.
    pub async fn admin(&self) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(&self.url(), NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        c.batch_execute("SET default_transaction_read_only = off")
            .await
            .expect("a writable session");
        c
    }

    /// Sets the whole server read-only (or back), for every session, and
    /// waits until a new session sees it.
    pub async fn read_only(&self, on: bool) {
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
            let (fresh, conn) = tokio_postgres::connect(&self.url(), NoTls)
                .await
                .expect("connect");
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
        // No wait for the older sessions: the postmaster signals every
        // backend right after it reloads, before it forks the new session
        // that saw the value, and a backend applies a pending reload
        // before it runs its next command.
    }
}

impl Node {
    /// Freezes (SIGSTOP) or thaws (SIGCONT) the postmaster and every process
    /// it started, as a paused VM would: their sockets stay open and the
    /// kernel still acknowledges what clients send, but nothing answers.
    pub fn freeze(&self, on: bool) {
        let signal = if on {
            nix::sys::signal::Signal::SIGSTOP
        } else {
            nix::sys::signal::Signal::SIGCONT
        };
        let pid_file = self.cluster.dir().join("data/postmaster.pid");
        let Ok(text) = std::fs::read_to_string(&pid_file) else {
            assert!(!on, "freeze a node that does not run");
            return;
        };
        let postmaster: i32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid");
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // The parent's pid is the second field after the command's ")".
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A frozen postmaster would not hear the stop.
        self.freeze(false);
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
