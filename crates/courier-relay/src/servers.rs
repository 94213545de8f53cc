//! Real etcd and nats-server processes, started on free loopback ports with
//! data directories this process owns, and stopped on drop.
//!
//! Nothing here stands in for a server: when a binary is missing, the error
//! names it and the Debian package that provides it.
//!
//! # Invariants
//! - Only processes started here are ever killed; every child is killed when
//!   its handle drops, error paths included.
//! - A server counts as started only after it answered a real request
//!   (etcd: a read; NATS: a JetStream API request), within a deadline.
//! - A restarted nats-server uses the same port and the same store
//!   directory, so a file-store stream survives it.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Which binaries to run. Tests point these at missing names to check the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub etcd: String,
    pub nats_server: String,
}

impl Default for Binaries {
    fn default() -> Self {
        Binaries {
            etcd: "etcd".into(),
            nats_server: "nats-server".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("`{binary}` was not found on PATH (nor in /usr/sbin): install the Debian package `{package}` (apt-get install -y {package}), or run scripts/install-relay-deps.sh")]
    MissingBinary {
        binary: String,
        package: &'static str,
    },
    #[error("cannot start {name}: {reason}")]
    Spawn { name: String, reason: String },
    #[error("{name} exited during start-up ({status}); last log lines:\n{log_tail}")]
    Exited {
        name: String,
        status: String,
        log_tail: String,
    },
    #[error("{name} did not answer within {ms} ms; last log lines:\n{log_tail}")]
    NotReady {
        name: String,
        ms: u64,
        log_tail: String,
    },
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> ServerError + '_ {
    move |e| ServerError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Finds a binary on PATH, then in the sbin directories Debian uses for servers.
pub fn find_binary(name: &str, package: &'static str) -> Result<PathBuf, ServerError> {
    let candidate = Path::new(name);
    if candidate.components().count() > 1 {
        return if candidate.is_file() {
            Ok(candidate.to_path_buf())
        } else {
            Err(ServerError::MissingBinary {
                binary: name.into(),
                package,
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or(ServerError::MissingBinary {
            binary: name.into(),
            package,
        })
}

/// A loopback port leased for as long as the lease lives (see
/// `courier_ports`): no other courier process takes it before our server
/// binds it, or while a restarted server comes back on it.
pub fn lease_port() -> Result<courier_ports::PortLease, ServerError> {
    courier_ports::lease().map_err(|e| ServerError::Spawn {
        name: "port lease".into(),
        reason: e.to_string(),
    })
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn spawn(binary: &Path, args: &[String], log: &Path, name: &str) -> Result<Child, ServerError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_err(log))?;
    let err = out.try_clone().map_err(io_err(log))?;
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ServerError::Spawn {
            name: name.into(),
            reason: e.to_string(),
        })
}

/// Waits until `probe` succeeds, the child exits, or the deadline passes.
async fn wait_ready<F, Fut>(
    child: &mut Child,
    name: &str,
    log: &Path,
    timeout: Duration,
    mut probe: F,
) -> Result<(), ServerError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(ServerError::Exited {
                name: name.into(),
                status: status.to_string(),
                log_tail: log_tail(log),
            });
        }
        if probe().await {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(ServerError::NotReady {
                name: name.into(),
                ms: timeout.as_millis() as u64,
                log_tail: log_tail(log),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A single-member etcd cluster.
pub struct ManagedEtcd {
    child: Child,
    pub endpoint: String,
    _leases: [courier_ports::PortLease; 2],
}

impl ManagedEtcd {
    pub async fn start(
        binary: &str,
        dir: &Path,
        ready_timeout: Duration,
    ) -> Result<Self, ServerError> {
        let binary = find_binary(binary, "etcd-server")?;
        let mut last = None;
        // A port taken by something outside courier makes etcd exit: try new ports.
        for _ in 0..3 {
            let leases = [lease_port()?, lease_port()?];
            let (client, peer) = (leases[0].port(), leases[1].port());
            let endpoint = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let data = dir.join("etcd-data");
            let log = dir.join("etcd.log");
            let args: Vec<String> = [
                "--name",
                "default",
                "--data-dir",
                &data.display().to_string(),
                "--listen-client-urls",
                &endpoint,
                "--advertise-client-urls",
                &endpoint,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &format!("default={peer_url}"),
                "--initial-cluster-state",
                "new",
                "--heartbeat-interval",
                "10",
                "--election-timeout",
                "100",
                "--log-level",
                "warn",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut child = spawn(&binary, &args, &log, "etcd")?;
            let probe_endpoint = endpoint.clone();
            let ready = wait_ready(&mut child, "etcd", &log, ready_timeout, || {
                let ep = probe_endpoint.clone();
                async move { etcd_answers(&ep).await }
            })
            .await;
            match ready {
                Ok(()) => {
                    return Ok(ManagedEtcd {
                        child,
                        endpoint,
                        _leases: leases,
                    })
                }
                Err(e @ ServerError::Exited { .. }) => {
                    let _ = std::fs::remove_dir_all(&data);
                    last = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(ServerError::Spawn {
            name: "etcd".into(),
            reason: "no attempt".into(),
        }))
    }

    /// Kills etcd (SIGKILL) and waits for it.
    pub async fn kill(&mut self) -> Result<ExitStatus, ServerError> {
        let _ = self.child.start_kill();
        self.child.wait().await.map_err(|e| ServerError::Spawn {
            name: "etcd".into(),
            reason: e.to_string(),
        })
    }
}

async fn etcd_answers(endpoint: &str) -> bool {
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(300))
        .with_timeout(Duration::from_millis(300));
    let probe = async {
        let mut c = etcd_client::Client::connect([endpoint], Some(opts))
            .await
            .ok()?;
        c.get("/courier/probe", None).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(600), probe).await,
        Ok(Some(_))
    )
}

/// A single nats-server with JetStream and a file store.
pub struct ManagedNats {
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
    _lease: courier_ports::PortLease,
    store_dir: PathBuf,
    log: PathBuf,
    pub url: String,
}

impl ManagedNats {
    pub async fn start(
        binary: &str,
        dir: &Path,
        ready_timeout: Duration,
    ) -> Result<Self, ServerError> {
        let binary = find_binary(binary, "nats-server")?;
        let mut last = None;
        for _ in 0..3 {
            let lease = lease_port()?;
            let port = lease.port();
            let mut nats = ManagedNats {
                child: None,
                binary: binary.clone(),
                port,
                _lease: lease,
                store_dir: dir.join("nats-store"),
                log: dir.join("nats.log"),
                url: format!("nats://127.0.0.1:{port}"),
            };
            match nats.launch(ready_timeout).await {
                Ok(()) => return Ok(nats),
                Err(e @ ServerError::Exited { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(ServerError::Spawn {
            name: "nats-server".into(),
            reason: "no attempt".into(),
        }))
    }

    async fn launch(&mut self, ready_timeout: Duration) -> Result<(), ServerError> {
        let args: Vec<String> = vec![
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.port.to_string(),
            "-js".into(),
            "-sd".into(),
            self.store_dir.display().to_string(),
        ];
        let mut child = spawn(&self.binary, &args, &self.log, "nats-server")?;
        let url = self.url.clone();
        wait_ready(&mut child, "nats-server", &self.log, ready_timeout, || {
            let url = url.clone();
            async move { jetstream_answers(&url).await }
        })
        .await?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the broker with SIGKILL and returns its wait status; the store
    /// directory stays.
    pub async fn kill(&mut self) -> Result<ExitStatus, ServerError> {
        let Some(mut child) = self.child.take() else {
            return Err(ServerError::Spawn {
                name: "nats-server".into(),
                reason: "not running".into(),
            });
        };
        let _ = child.start_kill();
        child.wait().await.map_err(|e| ServerError::Spawn {
            name: "nats-server".into(),
            reason: e.to_string(),
        })
    }

    /// Starts the broker again on the same port and store directory. The
    /// port was just released; retry briefly if something still holds it.
    pub async fn restart(&mut self, ready_timeout: Duration) -> Result<(), ServerError> {
        let start = Instant::now();
        loop {
            match self.launch(ready_timeout).await {
                Ok(()) => return Ok(()),
                Err(ServerError::Exited { .. }) if start.elapsed() < ready_timeout => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }
}

/// Whether JetStream answers an API request (`$JS.API.INFO`).
pub async fn jetstream_answers(url: &str) -> bool {
    let probe = async {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_millis(300))
            .connect(url)
            .await
            .ok()?;
        let reply = client
            .request("$JS.API.INFO", bytes::Bytes::new())
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&reply.payload).into_owned();
        (!text.contains("\"error\"")).then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(800), probe).await,
        Ok(Some(()))
    )
}

/// etcd and nats-server, started together in a temporary directory that is
/// removed (after the servers are killed) on drop.
pub struct Servers {
    pub etcd: ManagedEtcd,
    pub nats: ManagedNats,
    // Dropped last: the servers die before their directories go.
    dir: tempfile::TempDir,
}

impl Servers {
    pub async fn start(binaries: &Binaries, ready_timeout: Duration) -> Result<Self, ServerError> {
        // Check both binaries first, so the error names every missing one early.
        find_binary(&binaries.etcd, "etcd-server")?;
        find_binary(&binaries.nats_server, "nats-server")?;
        let dir = tempfile::Builder::new()
            .prefix("courier-relay-")
            .tempdir()
            .map_err(|e| ServerError::Io {
                path: "temporary directory".into(),
                reason: e.to_string(),
            })?;
        let etcd = ManagedEtcd::start(&binaries.etcd, dir.path(), ready_timeout).await?;
        let nats = ManagedNats::start(&binaries.nats_server, dir.path(), ready_timeout).await?;
        Ok(Servers { etcd, nats, dir })
    }

    /// Leaves the directory (data, logs) in place when the servers drop.
    pub fn keep_dir(&mut self) {
        self.dir.disable_cleanup(true);
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
