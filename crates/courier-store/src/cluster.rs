//! A managed local PostgreSQL cluster: initdb on first use, started on a free
//! loopback port with its socket inside the data directory, run as an
//! unprivileged user when courier runs as root (PostgreSQL refuses root).
//!
//! Layout under `dir` ([`default_dir`] unless the caller names one):
//! `data/` (the cluster), `sock/` (the Unix socket), `port` (the port it was
//! started on), `server.log`.
//!
//! # Invariants
//! - Only a directory this module initialised is ever started or stopped.
//! - `--database-url` bypasses this module entirely: an existing server's files
//!   are never touched.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "PostgreSQL server binaries ({0}) not found on PATH or under /usr/lib/postgresql/*/bin: \
         install PostgreSQL (Debian: apt-get install postgresql), or pass --database-url \
         (or set DATABASE_URL) to use an existing server"
    )]
    BinariesMissing(&'static str),
    #[error("running as root and no unprivileged 'postgres' user exists to run PostgreSQL: create one (useradd postgres) or pass --database-url")]
    NoUnprivilegedUser,
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("io error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("PostgreSQL did not become ready within {0:?}; see {1}")]
    NotReady(Duration, PathBuf),
}

/// How to stop a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Clean shutdown.
    Fast,
    /// A crash: no checkpoint, crash recovery on the next start.
    Immediate,
}

/// A local cluster under a directory.
#[derive(Debug, Clone)]
pub struct Cluster {
    dir: PathBuf,
    /// Extra `-c name=value` settings given at start.
    settings: Vec<(String, String)>,
}

/// The database courier uses inside a managed cluster.
pub const DATABASE: &str = "courier";

impl Cluster {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        // Commands run with the cluster directory as their working
        // directory, so every path handed to them must be absolute.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Cluster {
            dir,
            settings: Vec::new(),
        }
    }

    /// Adds a server setting for the next start (e.g. `synchronous_commit=off`).
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_string(), value.to_string()));
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The socket directory: inside the cluster directory, unless that path
    /// would be too long for a Unix socket (107 bytes on Linux); then a short
    /// directory under /tmp named after the cluster directory.
    fn sock(&self) -> PathBuf {
        let inside = self.dir.join("sock");
        if inside.as_os_str().len() + "/.s.PGSQL.65535".len() < 100 {
            return inside;
        }
        PathBuf::from(format!("/tmp/courier-pg-{:016x}", path_hash(&self.dir)))
    }

    fn port_file(&self) -> PathBuf {
        self.dir.join("port")
    }

    pub fn log_file(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The port of a running cluster, if it is running.
    pub fn running_port(&self) -> Result<Option<u16>, ClusterError> {
        if !self.data().join("PG_VERSION").exists() {
            return Ok(None);
        }
        let pg_ctl = find_binary("pg_ctl")?;
        let out = self
            .command(&pg_ctl)?
            .args(["status", "-D"])
            .arg(self.data())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| io_err(&pg_ctl, e))?;
        if !out.success() {
            return Ok(None);
        }
        Ok(std::fs::read_to_string(self.port_file())
            .ok()
            .and_then(|s| s.trim().parse().ok()))
    }

    /// The postmaster's process id, from `postmaster.pid`, while it runs.
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// The connection URL of the running cluster.
    pub fn url_for_port(port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/{DATABASE}")
    }

    /// Starts the cluster (initialising it on first use) unless it already
    /// runs, waits until it accepts connections, creates the courier database,
    /// and returns its URL. Migrations are the caller's next step.
    pub fn start(&self) -> Result<String, ClusterError> {
        if let Some(port) = self.running_port()? {
            return Ok(Self::url_for_port(port));
        }
        let pg_ctl = find_binary("pg_ctl")?;
        self.prepare_dirs()?;
        if !self.data().join("PG_VERSION").exists() {
            self.initdb()?;
        }
        // A crashed postmaster can leave a stale pid file; pg_ctl handles it,
        // but a start right after a SIGKILL can still fail briefly: retry.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last_err = String::new();
        while Instant::now() < deadline {
            // Prefer the port of the last start, so clients that knew the
            // cluster before a restart find it again. The lease keeps other
            // courier processes off the port until the server listens.
            let previous = std::fs::read_to_string(self.port_file())
                .ok()
                .and_then(|s| s.trim().parse::<u16>().ok());
            let lease = match previous {
                Some(p) => courier_ports::lease_preferring(p),
                None => courier_ports::lease(),
            }
            .map_err(|e| ClusterError::Command {
                what: "choosing a port".into(),
                detail: e.to_string(),
            })?;
            let port = lease.port();
            let mut opts = format!(
                "-c listen_addresses=127.0.0.1 -p {port} -k {} -c max_connections=300 -c shared_buffers=128MB",
                self.sock().display()
            );
            for (k, v) in &self.settings {
                opts.push_str(&format!(" -c {k}={v}"));
            }
            let out = self
                .command(&pg_ctl)?
                .args(["start", "-w", "-t", "20", "-D"])
                .arg(self.data())
                .arg("-l")
                .arg(self.log_file())
                .args(["-o", &opts])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .map_err(|e| io_err(&pg_ctl, e))?;
            if out.status.success() {
                std::fs::write(self.port_file(), port.to_string())
                    .map_err(|e| io_err(&self.port_file(), e))?;
                self.create_database(port)?;
                return Ok(Self::url_for_port(port));
            }
            last_err = String::from_utf8_lossy(&out.stderr).trim().to_string();
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(ClusterError::Command {
            what: "pg_ctl start".into(),
            detail: format!("{last_err} (see {})", self.log_file().display()),
        })
    }

    /// Stops the cluster if it runs.
    pub fn stop(&self, mode: StopMode) -> Result<(), ClusterError> {
        if self.running_port()?.is_none() {
            return Ok(());
        }
        let pg_ctl = find_binary("pg_ctl")?;
        let m = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        let out = self
            .command(&pg_ctl)?
            .args(["stop", "-w", "-m", m, "-D"])
            .arg(self.data())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| io_err(&pg_ctl, e))?;
        if !out.status.success() {
            return Err(ClusterError::Command {
                what: format!("pg_ctl stop -m {m}"),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    fn prepare_dirs(&self) -> Result<(), ClusterError> {
        for d in [&self.dir, &self.sock()] {
            std::fs::create_dir_all(d).map_err(|e| io_err(d, e))?;
        }
        // The directories courier creates above a cluster of its shared place
        // must be searchable by the user that runs it, whatever the umask.
        if self.dir.starts_with(SHARED_BASE) {
            for p in self.dir.ancestors().skip(1) {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| io_err(p, e))?;
                if p == Path::new(SHARED_BASE) {
                    break;
                }
            }
        }
        if let Some(user) = run_as_user()? {
            // PostgreSQL runs as `user`: it must own its directory and be able
            // to reach it through every ancestor.
            let abs = std::fs::canonicalize(&self.dir).map_err(|e| io_err(&self.dir, e))?;
            for p in abs.ancestors().skip(1) {
                let mode = std::fs::metadata(p)
                    .map_err(|e| io_err(p, e))?
                    .permissions()
                    .mode();
                if mode & 0o001 == 0 {
                    return Err(ClusterError::Command {
                        what: "prepare the cluster directory".into(),
                        detail: format!(
                            "{} is not searchable by the unprivileged user that runs PostgreSQL \
                             (mode {:o}); choose a data directory elsewhere (--pg-dir) or chmod o+x it",
                            p.display(),
                            mode & 0o777
                        ),
                    });
                }
            }
            for d in [self.dir.clone(), self.sock()] {
                nix::unistd::chown(&d, Some(user.uid), Some(user.gid))
                    .map_err(|e| io_err(&d, std::io::Error::from_raw_os_error(e as i32)))?;
            }
            let mut perms = std::fs::metadata(&self.dir)
                .map_err(|e| io_err(&self.dir, e))?
                .permissions();
            perms.set_mode(0o755);
            std::fs::set_permissions(&self.dir, perms).map_err(|e| io_err(&self.dir, e))?;
        }
        Ok(())
    }

    fn initdb(&self) -> Result<(), ClusterError> {
        let initdb = find_binary("initdb")?;
        let out = self
            .command(&initdb)?
            .arg("-D")
            .arg(self.data())
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| io_err(&initdb, e))?;
        if !out.status.success() {
            return Err(ClusterError::Command {
                what: "initdb".into(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    fn create_database(&self, port: u16) -> Result<(), ClusterError> {
        // Runs on a thread of its own with a small runtime, so it works from
        // both synchronous and asynchronous callers.
        let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| io_err(Path::new("tokio runtime"), e))?;
        let log = self.log_file();
        std::thread::scope(|s| {
            s.spawn(|| {
                rt.block_on(async {
                    let deadline = Instant::now() + Duration::from_secs(20);
                    loop {
                        match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                            Ok((client, conn)) => {
                                tokio::spawn(conn);
                                let exists = client
                                    .query_opt(
                                        "SELECT 1 FROM pg_database WHERE datname = $1",
                                        &[&DATABASE],
                                    )
                                    .await
                                    .map_err(|e| ClusterError::Command {
                                        what: "check database".into(),
                                        detail: e.to_string(),
                                    })?;
                                if exists.is_none() {
                                    if let Err(e) = client
                                        .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
                                        .await
                                    {
                                        // A concurrent starter may have won.
                                        if e.code()
                                            != Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE)
                                        {
                                            return Err(ClusterError::Command {
                                                what: "CREATE DATABASE".into(),
                                                detail: e.to_string(),
                                            });
                                        }
                                    }
                                }
                                return Ok(());
                            }
                            Err(_) if Instant::now() < deadline => {
                                tokio::time::sleep(Duration::from_millis(50)).await
                            }
                            Err(_) => {
                                return Err(ClusterError::NotReady(
                                    Duration::from_secs(20),
                                    log.clone(),
                                ))
                            }
                        }
                    }
                })
            })
            .join()
            .unwrap_or_else(|_| {
                Err(ClusterError::Command {
                    what: "create database".into(),
                    detail: "thread panicked".into(),
                })
            })
        })
    }

    /// A command that runs as the unprivileged user when we are root.
    fn command(&self, program: &Path) -> Result<Command, ClusterError> {
        let mut cmd = Command::new(program);
        if let Some(user) = run_as_user()? {
            cmd.uid(user.uid.as_raw())
                .gid(user.gid.as_raw())
                .env("HOME", &self.dir);
            // The working directory must be readable by that user.
            cmd.current_dir(&self.dir);
        }
        Ok(cmd)
    }
}

/// Where the managed cluster of a project (the directory courier runs in)
/// lives by default; every run from the same directory gets the same place,
/// so `courier db stop` finds the cluster that `courier demo` started.
///
/// - PostgreSQL runs as this user: `PROJECT/.courier/pg`.
/// - courier runs as root, so PostgreSQL runs as `postgres`, which must reach
///   its directory through every ancestor. A checkout in a home directory of
///   mode 700 (`/root`) is out of its reach, so the cluster lives outside the
///   project: `/var/tmp/courier/NAME-HASH/pg`, where NAME is the project
///   directory's name and HASH a stable hash of its absolute path (`/var/tmp`
///   survives reboots, unlike `/tmp` on many systems).
pub fn default_dir(project: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(project)
        .or_else(|_| std::path::absolute(project))
        .unwrap_or_else(|_| project.to_path_buf());
    if !nix::unistd::Uid::effective().is_root() {
        return abs.join(".courier").join("pg");
    }
    let name: String = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    PathBuf::from(SHARED_BASE)
        .join(format!(
            "{name}-{:012x}",
            path_hash(&abs) & 0xffff_ffff_ffff
        ))
        .join("pg")
}

/// The shared place of clusters run as another user (see [`default_dir`]).
const SHARED_BASE: &str = "/var/tmp/courier";

/// FNV-1a over a path's bytes: stable across builds and Rust versions (the
/// standard library's hasher is not), so a directory named after a path
/// keeps its name when courier is rebuilt.
fn path_hash(p: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

struct RunAs {
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
}

fn run_as_user() -> Result<Option<RunAs>, ClusterError> {
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name("postgres") {
        Ok(Some(u)) => Ok(Some(RunAs {
            uid: u.uid,
            gid: u.gid,
        })),
        _ => Err(ClusterError::NoUnprivilegedUser),
    }
}

/// Finds a PostgreSQL server binary on PATH or in Debian's versioned directories.
pub fn find_binary(name: &'static str) -> Result<PathBuf, ClusterError> {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin").join(name))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    candidates.sort();
    candidates.pop().ok_or(ClusterError::BinariesMissing(name))
}

fn io_err(path: &Path, source: std::io::Error) -> ClusterError {
    ClusterError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_is_stable_per_project_and_apart_between_projects() {
        let a = default_dir(Path::new("/nonexistent/alpha/courier"));
        let b = default_dir(Path::new("/nonexistent/beta/courier"));
        assert_eq!(a, default_dir(Path::new("/nonexistent/alpha/courier")));
        assert_ne!(a, b);
        if nix::unistd::Uid::effective().is_root() {
            assert!(a.starts_with(SHARED_BASE), "{}", a.display());
            let leaf = a.parent().unwrap().file_name().unwrap().to_string_lossy();
            assert!(leaf.starts_with("courier-"), "{leaf}");
        } else {
            assert_eq!(a, Path::new("/nonexistent/alpha/courier/.courier/pg"));
        }
    }

    #[test]
    fn path_hash_is_fnv1a() {
        // Published FNV-1a 64 test vectors: a changed hash would move every
        // existing default cluster directory.
        assert_eq!(path_hash(Path::new("")), 0xcbf2_9ce4_8422_2325);
        assert_eq!(path_hash(Path::new("a")), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(path_hash(Path::new("foobar")), 0x8594_4171_f739_67e8);
    }
}
