//! A local highly available PostgreSQL: 3 etcd members and 3 Patroni nodes
//! (a primary and two standbys, PostgreSQL 15) on loopback ports, started
//! as the rig's own children so that a kill of Patroni is confirmed from
//! its wait status. `courier db ha up|down|status` and `courier chaos
//! --failover` are built on it.
//!
//! Layout under the cluster directory: `ports.json`, `pids` (every process
//! started, for the cleanup after a crash of ours), `etcd-N/` and
//! `etcd-N.log`, `node-N/` (owned by `postgres` when we are root: Patroni's
//! `patroni.yml`, `data/`, the socket) and `node-N.log` (Patroni's and
//! PostgreSQL's output).
//!
//! - [`config`]: the settings and the files and flags they become (pure);
//! - [`rest`]: Patroni's REST API (roles, timelines, switchover);
//! - [`procs`]: the postmasters under each Patroni, found in `/proc`;
//! - [`faults`]: node death, postmaster kill, pause, switchover, and the
//!   WAL senders of the negative control.
//!
//! # Invariants
//! - [`HaCluster::up`] first stops whatever an earlier run left in the
//!   directory (processes named in `pids` and the postmasters of its
//!   nodes) and removes it: a crash of ours never blocks the next start.
//! - Unless detached, every etcd and Patroni process is killed when the
//!   [`HaCluster`] is dropped, and [`HaCluster::down`] stops the
//!   postmasters too.

pub mod config;
pub mod faults;
pub mod procs;
pub mod rest;

pub use config::{HaSettings, Ports, MEMBERS};
pub use rest::{ClusterView, Member, Rest};

use crate::fleet::Proc;
use crate::RigError;
use nix::sys::signal::Signal;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// How long creating the database on a new leader is retried.
const CREATE_DB_RETRY_S: u64 = 30;
/// How long the cluster may take to elect a leader with a synchronous standby.
pub const READY_WAIT_S: u64 = 120;
/// How long Patroni may take to stop its PostgreSQL on SIGTERM.
pub const STOP_GRACE_S: u64 = 20;

/// A running cluster.
pub struct HaCluster {
    dir: PathBuf,
    settings: HaSettings,
    ports: Ports,
    _port_leases: Vec<courier_ports::PortLease>,
    etcd: Vec<Option<Proc>>,
    patroni: Vec<Option<Proc>>,
    rest: Rest,
    /// Processes outlive this handle (`courier db ha up`).
    detached: bool,
}

fn rig_err(name: &str, detail: impl std::fmt::Display) -> RigError {
    RigError::Process {
        name: name.to_string(),
        detail: detail.to_string(),
    }
}

/// The user PostgreSQL runs as when we are root (it refuses root).
fn run_as() -> Result<Option<(u32, u32)>, RigError> {
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name("postgres") {
        Ok(Some(u)) => Ok(Some((u.uid.as_raw(), u.gid.as_raw()))),
        _ => Err(RigError::Settings(
            "running as root and no 'postgres' user exists to run PostgreSQL".into(),
        )),
    }
}

/// Twelve ports, leased for as long as the cluster handle lives: a node
/// restarted by a fault comes back on its port, and no other courier process
/// (another test's cluster) can take a port before its server binds it.
fn pick_ports() -> Result<(Ports, Vec<courier_ports::PortLease>), RigError> {
    let leases = courier_ports::lease_many(4 * MEMBERS).map_err(|e| rig_err("port lease", e))?;
    let p: Vec<u16> = leases.iter().map(|l| l.port()).collect();
    let take = |k: usize| [p[k * MEMBERS], p[k * MEMBERS + 1], p[k * MEMBERS + 2]];
    let ports = Ports {
        etcd_client: take(0),
        etcd_peer: take(1),
        rest: take(2),
        pg: take(3),
    };
    Ok((ports, leases))
}

impl HaCluster {
    /// Brings the cluster up under `dir` (removing what an earlier run
    /// left there) and waits until it has a leader, every node runs and,
    /// when synchronous, a synchronous standby; creates the `courier`
    /// database.
    pub async fn up(
        dir: &Path,
        settings: HaSettings,
        detached: bool,
    ) -> Result<HaCluster, RigError> {
        settings.validate().map_err(RigError::Settings)?;
        let dir = std::path::absolute(dir).map_err(|e| RigError::io(dir, e))?;
        clean(&dir).await?;
        std::fs::create_dir_all(&dir).map_err(|e| RigError::io(&dir, e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| RigError::io(&dir, e))?;
        // Written first: it marks the directory as ours for `clean`.
        let (ports, port_leases) = pick_ports()?;
        let ports_file = dir.join("ports.json");
        let json = serde_json::to_string(&ports).expect("ports encode");
        std::fs::write(&ports_file, json).map_err(|e| RigError::io(&ports_file, e))?;
        let mut c = HaCluster {
            rest: Rest::new(&ports.rest),
            dir,
            settings,
            ports,
            _port_leases: port_leases,
            etcd: (0..MEMBERS).map(|_| None).collect(),
            patroni: (0..MEMBERS).map(|_| None).collect(),
            detached,
        };
        for i in 0..MEMBERS {
            c.start_etcd(i)?;
        }
        c.wait_etcd().await?;
        for i in 0..MEMBERS {
            c.write_node(i)?;
            c.start_patroni(i)?;
        }
        c.wait_healthy(Duration::from_secs(READY_WAIT_S)).await?;
        c.create_database().await?;
        Ok(c)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    pub fn settings(&self) -> &HaSettings {
        &self.settings
    }

    pub fn rest(&self) -> &Rest {
        &self.rest
    }

    /// The multi-host URL of the `courier` database.
    pub fn url(&self) -> String {
        self.ports.url()
    }

    pub fn node_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node-{i}"))
    }

    /// Where each process writes its output.
    pub fn logs(&self) -> Vec<PathBuf> {
        let etcd = (0..MEMBERS).map(|i| self.dir.join(format!("etcd-{i}.log")));
        etcd.chain((0..MEMBERS).map(|i| self.dir.join(format!("node-{i}.log"))))
            .collect()
    }

    fn command(&self, program: &str, args: &[String], log: &Path) -> Result<Command, RigError> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| RigError::io(log, e))?;
        let err = out.try_clone().map_err(|e| RigError::io(log, e))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(!self.detached);
        if self.detached {
            // Its own process group: a Ctrl-C in the terminal that ran
            // `courier db ha up` does not reach it.
            cmd.process_group(0);
        }
        Ok(cmd)
    }

    fn spawn(&self, name: String, mut cmd: Command) -> Result<Proc, RigError> {
        let child = cmd
            .spawn()
            .map_err(|e| rig_err(&name, format!("cannot start: {e}")))?;
        let pid = child.id().ok_or_else(|| rig_err(&name, "no pid"))? as i32;
        Ok(Proc { name, child, pid })
    }

    fn start_etcd(&mut self, i: usize) -> Result<(), RigError> {
        let data = self.dir.join(format!("etcd-{i}"));
        let log = self.dir.join(format!("etcd-{i}.log"));
        let cmd = self.command("etcd", &config::etcd_args(&self.ports, i, &data), &log)?;
        self.etcd[i] = Some(self.spawn(format!("etcd-{i}"), cmd)?);
        self.write_pids()
    }

    /// Node `i`'s directory, owned by the user PostgreSQL runs as, with its
    /// `patroni.yml`.
    fn write_node(&self, i: usize) -> Result<(), RigError> {
        let d = self.node_dir(i);
        std::fs::create_dir_all(&d).map_err(|e| RigError::io(&d, e))?;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| RigError::io(&d, e))?;
        let pg_ctl = courier_store::cluster::find_binary("pg_ctl")?;
        // Patroni needs the real directory (pg_rewind, pg_basebackup beside
        // postgres), not a directory of symlinks on PATH.
        let pg_ctl = std::fs::canonicalize(&pg_ctl).unwrap_or(pg_ctl);
        let bin = pg_ctl.parent().unwrap_or(Path::new("/usr/bin"));
        let yml = d.join("patroni.yml");
        let text = config::patroni_yaml(&self.settings, &self.ports, i, &d, bin);
        std::fs::write(&yml, text).map_err(|e| RigError::io(&yml, e))?;
        if let Some((uid, gid)) = run_as()? {
            for p in [&d, &yml] {
                let (u, g) = (Some(uid.into()), Some(gid.into()));
                nix::unistd::chown(p, u, g).map_err(|e| RigError::io(p, e.into()))?;
            }
        }
        Ok(())
    }

    /// Starts (or, after a node death, restarts) node `i`'s Patroni.
    pub fn start_patroni(&mut self, i: usize) -> Result<(), RigError> {
        let d = self.node_dir(i);
        let log = self.dir.join(format!("node-{i}.log"));
        let yml = d.join("patroni.yml").display().to_string();
        let mut cmd = self.command("patroni", &[yml], &log)?;
        cmd.env("HOME", &d).current_dir(&d);
        if let Some((uid, gid)) = run_as()? {
            cmd.uid(uid).gid(gid);
        }
        self.patroni[i] = Some(self.spawn(format!("patroni-{i}"), cmd)?);
        self.write_pids()
    }

    /// `pids`: one `name pid` line per process started, read by [`clean`].
    fn write_pids(&self) -> Result<(), RigError> {
        let lines: String = (self.etcd.iter().chain(&self.patroni))
            .flatten()
            .map(|p| format!("{} {}\n", p.name, p.pid))
            .collect();
        let f = self.dir.join("pids");
        std::fs::write(&f, lines).map_err(|e| RigError::io(&f, e))
    }

    async fn wait_etcd(&self) -> Result<(), RigError> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        'members: for p in self.ports.etcd_client {
            while Instant::now() < deadline {
                let url = format!("http://127.0.0.1:{p}/health");
                if let Ok(r) = http.get(&url).send().await {
                    if r.text().await.unwrap_or_default().contains("true") {
                        continue 'members;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let log = self.dir.join("etcd-0.log");
            return Err(rig_err(
                "etcd",
                format!("not healthy within 30 s; see {}", log.display()),
            ));
        }
        Ok(())
    }

    /// Waits until every node runs under a leader (with a synchronous
    /// standby when synchronous); returns what `/cluster` said.
    pub async fn wait_healthy(&self, within: Duration) -> Result<ClusterView, RigError> {
        let deadline = Instant::now() + within;
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(v) = self.rest.cluster().await {
                if v.healthy(self.settings.synchronous) {
                    return Ok(v);
                }
                last = Some(v);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let detail = format!(
            "no healthy cluster within {} s (last /cluster: {last:?}); see {}",
            within.as_secs(),
            self.dir.display()
        );
        Err(rig_err("patroni", detail))
    }

    /// A direct connection to node `i`'s PostgreSQL (database `db`).
    pub async fn connect(&self, i: usize, db: &str) -> Result<tokio_postgres::Client, String> {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres dbname={db} connect_timeout=2",
            self.ports.pg[i]
        );
        let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// Creates the `courier` database, and the probe table the pause's
    /// check writes to, on the leader. A leader just elected can refuse for a
    /// moment (a fresh-machine CI run saw `CREATE DATABASE courier: db
    /// error`), so it is retried for up to [`CREATE_DB_RETRY_S`], with the
    /// server's own message in the error; a database that already exists
    /// (an earlier try that did commit) counts as created.
    async fn create_database(&self) -> Result<(), RigError> {
        let deadline = Instant::now() + Duration::from_secs(CREATE_DB_RETRY_S);
        loop {
            match self.create_database_once().await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "creating the database on the leader; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    async fn create_database_once(&self) -> Result<(), RigError> {
        let view = self.rest.cluster().await.unwrap_or_default();
        let leader = view.leader().and_then(ClusterView::index_of);
        let leader =
            leader.ok_or_else(|| rig_err("patroni", "no leader to create the database on"))?;
        let c = self
            .connect(leader, "postgres")
            .await
            .map_err(|e| rig_err("postgres", e))?;
        for sql in [
            "CREATE DATABASE courier",
            "CREATE TABLE IF NOT EXISTS ha_probe (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())",
        ] {
            if let Err(e) = c.batch_execute(sql).await {
                let exists = e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE);
                if !exists {
                    let detail = e.as_db_error().map_or_else(
                        || e.to_string(),
                        |d| format!("{} ({})", d.message(), d.code().code()),
                    );
                    return Err(rig_err("postgres", format!("{sql}: {detail}")));
                }
            }
        }
        Ok(())
    }

    /// Stops the cluster: each Patroni by SIGTERM (it stops its PostgreSQL
    /// cleanly), SIGKILL after [`STOP_GRACE_S`]; any postmaster left, then
    /// etcd. The directory stays (the logs); [`clean`] removes it.
    pub async fn down(mut self) -> Result<(), RigError> {
        for p in std::mem::take(&mut self.patroni).into_iter().flatten() {
            p.stop(Duration::from_secs(STOP_GRACE_S)).await?;
        }
        for i in 0..MEMBERS {
            if let Some(pm) = procs::postmaster_pid(&self.node_dir(i).join("data")) {
                let tree = procs::postgres_tree(pm);
                procs::signal_all(&tree, Signal::SIGKILL);
                procs::gone(&tree).await;
            }
        }
        for p in std::mem::take(&mut self.etcd).into_iter().flatten() {
            p.stop(Duration::from_secs(5)).await?;
        }
        let f = self.dir.join("pids");
        std::fs::remove_file(&f).ok();
        Ok(())
    }
}

impl Drop for HaCluster {
    /// Patroni and etcd die by `kill_on_drop`; the postmasters under them
    /// are not our children, so they are killed here (unless detached).
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        for p in self.patroni.iter().flatten() {
            let _ = p.signal(Signal::SIGKILL);
        }
        for i in 0..MEMBERS {
            if let Some(pm) = procs::postmaster_pid(&self.node_dir(i).join("data")) {
                procs::signal_all(&procs::postgres_tree(pm), Signal::SIGKILL);
            }
        }
    }
}

/// What [`clean`] found running and stopped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleaned {
    pub processes: usize,
    pub removed: bool,
}

/// Stops every process an earlier cluster left under `dir` (the ones named
/// in `pids`, if they are still etcd or Patroni, and the postmasters of its
/// nodes with their children) and removes the directory. Patroni gets a
/// SIGTERM first, so a cluster left by `courier db ha up` stops cleanly.
pub async fn clean(dir: &Path) -> Result<Cleaned, RigError> {
    let mut out = Cleaned::default();
    if !dir.exists() {
        return Ok(out);
    }
    // Never remove a directory this module did not make (a mistyped
    // --ha-dir): ours has its ports file from the first moment of `up`.
    let empty = std::fs::read_dir(dir)
        .map_err(|e| RigError::io(dir, e))?
        .next()
        .is_none();
    if !empty && !dir.join("ports.json").exists() {
        return Err(RigError::Settings(format!(
            "{} is not an HA cluster directory (no ports.json): not touching it",
            dir.display()
        )));
    }
    let recorded = std::fs::read_to_string(dir.join("pids")).unwrap_or_default();
    let ours = |pid: &i32| {
        let c = procs::cmdline(*pid);
        procs::alive(*pid) && (c.contains("patroni") || c.contains("etcd"))
    };
    let pids: Vec<i32> = (recorded.lines())
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .filter(ours)
        .collect();
    let (patroni, etcd): (Vec<i32>, Vec<i32>) = pids
        .into_iter()
        .partition(|p| procs::cmdline(*p).contains("patroni"));
    procs::signal_all(&patroni, Signal::SIGTERM);
    if !procs::gone(&patroni).await {
        procs::signal_all(&patroni, Signal::SIGKILL);
    }
    let mut rest = etcd.clone();
    for i in 0..MEMBERS {
        if let Some(pm) = procs::postmaster_pid(&dir.join(format!("node-{i}/data"))) {
            rest.extend(procs::postgres_tree(pm));
        }
    }
    procs::signal_all(&rest, Signal::SIGKILL);
    if !procs::gone(&rest).await || !procs::gone(&patroni).await {
        return Err(rig_err(
            "cleanup",
            format!("processes under {} did not stop", dir.display()),
        ));
    }
    out.processes = patroni.len() + rest.len();
    std::fs::remove_dir_all(dir).map_err(|e| RigError::io(dir, e))?;
    out.removed = true;
    Ok(out)
}

/// The ports of the cluster under `dir`, from its `ports.json`.
pub fn recorded_ports(dir: &Path) -> Option<Ports> {
    let text = std::fs::read_to_string(dir.join("ports.json")).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clean_refuses_a_directory_it_did_not_make_and_removes_its_own() {
        let d = tempfile::tempdir().unwrap();
        let foreign = d.path().join("foreign");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("notes.txt"), "keep me").unwrap();
        let err = clean(&foreign).await.unwrap_err();
        assert!(
            err.to_string().contains("not an HA cluster directory"),
            "{err}"
        );
        assert!(foreign.join("notes.txt").exists());
        let ours = d.path().join("ours");
        std::fs::create_dir_all(ours.join("node-0")).unwrap();
        std::fs::write(ours.join("ports.json"), "{}").unwrap();
        // A pid that is not etcd or Patroni (our own) is never signalled.
        std::fs::write(
            ours.join("pids"),
            format!("etcd-0 {}\n", std::process::id()),
        )
        .unwrap();
        let c = clean(&ours).await.unwrap();
        assert_eq!(
            c,
            Cleaned {
                processes: 0,
                removed: true
            }
        );
        assert!(!ours.exists());
    }
}
