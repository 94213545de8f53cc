//! The long run: N tasks through real relay and worker processes that are
//! SIGKILLed and restarted at seeded random moments, plus one broker restart,
//! ending with an exact counter.
//!
//! The processes are this same binary's hidden subcommands (`relay-proc`,
//! `worker-proc`), started with a JSON [`ProcConfig`] that has no fault
//! fields: the only faults here are real kills.
//!
//! # Invariants
//! - Every kill is checked from the wait status: the victim died by SIGKILL.
//! - The run ends only when every task has its result, the outbox is empty
//!   and the consumer has nothing left to deliver; then the shared checker
//!   judges what etcd and the stream hold.
//! - The seed fixes the amounts, the repeated requests, the kill schedule and
//!   the victims; it is printed before anything else.

use crate::broker::{Broker, BrokerError, Names};
use crate::check::{check, ExpectedTask, RepeatedCreate, Violation};
use crate::cluster::{Cluster, ClusterBinaries};
use crate::events::{self, unix_ms, EventKind, EventLog};
use crate::faults::{self, ClusterChaos, FaultKind, FaultRecord, KindRow};
use crate::lab::Endpoints;
use crate::limits::RelayLimits;
use crate::model::{CreateRequest, Keys, Protocol};
use crate::protocol::{self, CreateError};
use crate::relay::Relay;
use crate::servers::{Binaries, ServerError, Servers};
use crate::store::{Store, StoreError};
use crate::worker::Worker;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

/// Most tasks in one run.
pub const TASKS_MAX: u64 = 1_000_000;
/// Most worker processes.
pub const WORKERS_MAX: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Relay,
    Worker,
}

/// What a relay or worker process is told on its command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcConfig {
    pub role: Role,
    pub name: String,
    pub endpoints: Endpoints,
    pub namespace: String,
    pub limits: RelayLimits,
    pub seed: u64,
    /// The protocol the process follows (the reference, or a broken one as a
    /// negative control of the checker).
    #[serde(default = "reference_protocol")]
    pub protocol: Protocol,
    /// Where a worker appends its commits, suppressions and redeliveries.
    #[serde(default)]
    pub events_dir: Option<PathBuf>,
}

fn reference_protocol() -> Protocol {
    Protocol::Reference
}

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error(transparent)]
    Config(#[from] crate::model::IdError),
    #[error(transparent)]
    Limits(#[from] crate::limits::LimitsError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Worker(#[from] crate::worker::WorkerError),
}

/// The body of `courier relay relay-proc` / `worker-proc`: connects (retrying
/// while a server is down), then relays or works until its parent dies.
pub async fn run_proc(cfg: ProcConfig) -> Result<(), ProcError> {
    cfg.limits.validate()?;
    let keys = Keys::new(&cfg.namespace)?;
    let stop = CancellationToken::new();
    watch_parent(stop.clone());
    let retry = Duration::from_millis(200);
    let store = loop {
        match Store::connect(&cfg.endpoints.etcd, keys.clone(), &cfg.limits).await {
            Ok(s) => break s,
            Err(e) if !stop.is_cancelled() => {
                tracing::warn!(proc = %cfg.name, error = %e, "etcd unavailable; retrying");
                tokio::time::sleep(retry).await;
            }
            Err(_) => return Ok(()),
        }
    };
    let broker = loop {
        match Broker::connect(&cfg.endpoints.nats, Names::new(&keys), &cfg.limits).await {
            Ok(b) => break b,
            Err(e) if !stop.is_cancelled() => {
                tracing::warn!(proc = %cfg.name, error = %e, "nats-server unavailable; retrying");
                tokio::time::sleep(retry).await;
            }
            Err(_) => return Ok(()),
        }
    };
    match cfg.role {
        Role::Relay => {
            let mut relay = Relay::new(
                store,
                broker,
                cfg.protocol.relay_order(),
                cfg.limits.clone(),
                &cfg.name,
                None,
                None,
            );
            relay.run(stop).await?;
        }
        Role::Worker => {
            let mut worker = Worker::new(
                store,
                broker,
                cfg.protocol,
                cfg.limits.clone(),
                &cfg.name,
                None,
                None,
                cfg.seed,
            );
            if let Some(dir) = &cfg.events_dir {
                match EventLog::open(dir, &cfg.name) {
                    Ok(log) => worker = worker.with_events(log),
                    Err(e) => tracing::warn!(error = %e, "no event log"),
                }
            }
            worker.run(stop).await?;
        }
    }
    Ok(())
}

/// Cancels `stop` when the parent process goes away, so an orphaned relay or
/// worker does not outlive its run.
fn watch_parent(stop: CancellationToken) {
    let parent = std::os::unix::process::parent_id();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if std::os::unix::process::parent_id() != parent {
                tracing::warn!("parent process is gone; stopping");
                stop.cancel();
                return;
            }
        }
    });
}

#[derive(Debug, Clone)]
pub struct RunConfig {
    pub tasks: u64,
    pub seed: u64,
    pub workers: u32,
    /// `None`: start etcd and nats-server for the run (and restart the broker once).
    pub endpoints: Option<Endpoints>,
    pub binaries: Binaries,
    pub limits: RelayLimits,
    /// This binary, and the arguments that lead to the hidden subcommands
    /// (e.g. `["relay"]` for `courier relay relay-proc`).
    pub exe: PathBuf,
    pub exe_args: Vec<String>,
    /// Pause between two kills, drawn uniformly from this range.
    pub kill_interval_min_ms: u64,
    pub kill_interval_max_ms: u64,
    /// Create requests in flight at once.
    pub create_concurrency_max: u32,
    /// Share of requests sent twice, in percent.
    pub repeat_percent: u32,
    /// Amounts are drawn from 1..=amount_max.
    pub amount_max: u64,
    /// The whole run must finish within this time.
    pub deadline_s: u64,
    pub progress: bool,
    /// Start the 3+3 cluster and inject the cluster faults.
    pub cluster: bool,
    pub cluster_binaries: ClusterBinaries,
    /// Times every cluster fault kind is injected.
    pub cluster_rounds: u32,
    /// The relay's and workers' protocol (a broken one is a negative control).
    pub protocol: Protocol,
    /// Kill relay and worker processes (off: only the cluster's faults, so
    /// whatever a broken protocol loses or doubles, a leader change did).
    pub process_kills: bool,
    /// Keep the run's directory (server data and logs, the processes' logs
    /// and event files) instead of removing it; the report names it.
    pub keep_dir: bool,
}

impl RunConfig {
    pub fn new(tasks: u64, seed: u64, exe: PathBuf, exe_args: Vec<String>) -> Self {
        RunConfig {
            tasks,
            seed,
            workers: 2,
            endpoints: None,
            binaries: Binaries::default(),
            limits: RelayLimits::default(),
            exe,
            exe_args,
            kill_interval_min_ms: 300,
            kill_interval_max_ms: 1_500,
            create_concurrency_max: 16,
            repeat_percent: 2,
            amount_max: 100,
            deadline_s: 900,
            progress: true,
            cluster: false,
            cluster_binaries: ClusterBinaries::default(),
            cluster_rounds: 1,
            protocol: Protocol::Reference,
            process_kills: true,
            keep_dir: false,
        }
    }

    pub fn validate(&self) -> Result<(), RunError> {
        self.limits.validate()?;
        let fail = |m: String| Err(RunError::Config(m));
        if self.tasks == 0 || self.tasks > TASKS_MAX {
            return fail(format!("tasks must be within 1..={TASKS_MAX}"));
        }
        if self.workers == 0 || self.workers > WORKERS_MAX {
            return fail(format!("workers must be within 1..={WORKERS_MAX}"));
        }
        if self.kill_interval_min_ms == 0 || self.kill_interval_max_ms < self.kill_interval_min_ms {
            return fail("kill interval must be positive and min <= max".into());
        }
        if self.create_concurrency_max == 0 || self.create_concurrency_max > 256 {
            return fail("create_concurrency_max must be within 1..=256".into());
        }
        if self.repeat_percent > 50 {
            return fail("repeat_percent must be at most 50".into());
        }
        if self.amount_max == 0 || self.amount_max > self.limits.amount_max {
            return fail(format!(
                "amount_max must be within 1..={}",
                self.limits.amount_max
            ));
        }
        if self.cluster && self.endpoints.is_some() {
            return fail("a cluster run starts its own servers: no endpoints".into());
        }
        if self.cluster_rounds > 20 {
            return fail("cluster_rounds must be within 0..=20".into());
        }
        if self.protocol == Protocol::Starter {
            return fail("the starter protocol is for the lab".into());
        }
        if self.deadline_s == 0 {
            return fail("deadline_s must be positive".into());
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid run configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Limits(#[from] crate::limits::LimitsError),
    #[error(transparent)]
    Servers(#[from] ServerError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("create failed: {0}")]
    Create(#[from] CreateError),
    #[error("cannot start {name}: {reason}")]
    Spawn { name: String, reason: String },
    #[error("{name} did not die by SIGKILL: {status}")]
    KillUnconfirmed { name: String, status: String },
    #[error(
        "the run did not finish within {deadline_s} s: {completed} of {tasks} tasks completed"
    )]
    Deadline {
        deadline_s: u64,
        completed: u64,
        tasks: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub seed: u64,
    pub tasks: u64,
    pub workers: u32,
    /// On the 3+3 cluster (else one etcd and one nats-server).
    pub cluster: bool,
    pub protocol: Protocol,
    /// From the first create to the last result.
    pub elapsed_ms: u64,
    pub tasks_per_s: f64,
    pub relay_kills: u64,
    pub worker_kills: u64,
    /// Processes that exited without being killed (restarted all the same).
    pub unexpected_exits: u64,
    pub broker_restarts: u64,
    pub repeated_creates: u64,
    pub stream_messages: u64,
    /// Stream messages beyond one per task: publications repeated after a crash or a lost ACK.
    pub extra_copies: u64,
    pub deliveries: u64,
    pub dedup_records: u64,
    pub results: u64,
    pub counter: u64,
    pub expected_counter: u64,
    pub effects: Effects,
    /// Deliveries after the first, and those the dedup record suppressed.
    pub redeliveries: u64,
    pub suppressed: u64,
    /// Dedup records are kept at least this long; no copy can arrive later
    /// than `dedup_window_min_ms` after the first apply.
    pub dedup_retention_ms: u64,
    pub dedup_window_min_ms: u64,
    /// Every fault, in time order.
    pub faults: Vec<FaultRecord>,
    /// Per fault kind: count, recovery, stream copies, redeliveries, suppressions.
    pub fault_table: Vec<KindRow>,
    /// Why the table fails the run (a kind missing, a fault without recovery).
    pub table_failures: Vec<String>,
    pub violations: Vec<Violation>,
    pub passed: bool,
    /// The run's directory, when it was kept.
    #[serde(default)]
    pub kept_dir: Option<PathBuf>,
}

/// One relay or worker process of the run.
struct Proc {
    cfg: ProcConfig,
    child: Child,
}

fn spawn_proc(run: &RunConfig, cfg: &ProcConfig, log_dir: &Path) -> Result<Proc, RunError> {
    let err = |reason: String| RunError::Spawn {
        name: cfg.name.clone(),
        reason,
    };
    let sub = match cfg.role {
        Role::Relay => "relay-proc",
        Role::Worker => "worker-proc",
    };
    let log_path = log_dir.join(format!("{}.log", cfg.name.replace('#', "-")));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| err(format!("{}: {e}", log_path.display())))?;
    let json = serde_json::to_string(cfg).map_err(|e| err(e.to_string()))?;
    let child = Command::new(&run.exe)
        .args(&run.exe_args)
        .arg(sub)
        .arg("--config")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| err(e.to_string()))?;
    Ok(Proc {
        cfg: cfg.clone(),
        child,
    })
}

/// Kills a process with SIGKILL and confirms from its wait status that the
/// signal killed it. `Ok(false)`: it had already exited on its own.
async fn kill_confirmed(child: &mut Child, name: &str) -> Result<bool, RunError> {
    if let Ok(Some(_)) = child.try_wait() {
        return Ok(false);
    }
    let _ = child.start_kill();
    let status = child.wait().await.map_err(|e| RunError::Spawn {
        name: name.into(),
        reason: e.to_string(),
    })?;
    match status.signal() {
        Some(9) => Ok(true),
        // It exited by itself between the check and the kill.
        None => Ok(false),
        Some(_) => Err(RunError::KillUnconfirmed {
            name: name.into(),
            status: status.to_string(),
        }),
    }
}

/// The amounts of the run, from the seed.
pub fn amounts(seed: u64, tasks: u64, amount_max: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..tasks)
        .map(|_| rng.random_range(1..=amount_max))
        .collect()
}

/// The servers of a run: started here (one of each, or the cluster), or
/// someone else's.
enum Rig {
    One(Box<Servers>),
    Cluster(Box<Cluster>),
    External,
}

impl Rig {
    async fn start(cfg: &RunConfig, ready: Duration) -> Result<(Rig, Endpoints), RunError> {
        if let Some(e) = &cfg.endpoints {
            return Ok((Rig::External, e.clone()));
        }
        if cfg.cluster {
            let c = Cluster::start(&cfg.cluster_binaries, ready).await?;
            let e = Endpoints {
                etcd: c.etcd_endpoints.clone(),
                nats: c.nats_url_list(),
            };
            return Ok((Rig::Cluster(Box::new(c)), e));
        }
        let s = Servers::start(&cfg.binaries, ready).await?;
        let e = Endpoints {
            etcd: vec![s.etcd.endpoint.clone()],
            nats: s.nats.url.clone(),
        };
        Ok((Rig::One(Box::new(s)), e))
    }

    fn dir(&self) -> Option<&Path> {
        match self {
            Rig::One(s) => Some(s.dir()),
            Rig::Cluster(c) => Some(c.dir()),
            Rig::External => None,
        }
    }

    fn keep_dir(&mut self) {
        match self {
            Rig::One(s) => s.keep_dir(),
            Rig::Cluster(c) => c.keep_dir(),
            Rig::External => {}
        }
    }
}

/// What the run's loop keeps between two ticks.
struct Chaos<'a> {
    cfg: &'a RunConfig,
    log_dir: PathBuf,
    procs: Vec<Proc>,
    rng: StdRng,
    next_kill: Instant,
    relay_kills: u64,
    worker_kills: u64,
    unexpected: u64,
    broker_restarts: u64,
    restart_at: u64,
    cluster: Option<ClusterChaos>,
    release: Arc<AtomicU64>,
    /// Process kills, as faults of the table.
    kills: Vec<FaultRecord>,
    /// Results at the previous tick: more now means the workers have work
    /// in hand (a kill then lands inside a message's handling).
    last_completed: u64,
}

/// How long a due process kill waits for a tick in which tasks completed
/// before it is carried out anyway.
const KILL_BUSY_WAIT_MS: u64 = 2_000;

impl<'a> Chaos<'a> {
    /// The fault sources of a run on `rig`, seeded from the run's seed.
    fn new(
        cfg: &'a RunConfig,
        log_dir: PathBuf,
        procs: Vec<Proc>,
        rig: &Rig,
        stream: &str,
    ) -> Self {
        let ready = Duration::from_millis(cfg.limits.server_ready_timeout_ms);
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x9e37_79b9_7f4a_7c15);
        let restart_at = cfg.tasks * rng.random_range(30..=70) / 100;
        let cluster = matches!(rig, Rig::Cluster(_)).then(|| {
            let chaos_rng = StdRng::seed_from_u64(rng.random());
            ClusterChaos::new(chaos_rng, cfg.cluster_rounds, cfg.tasks, ready, stream)
        });
        let release = Arc::new(AtomicU64::new(
            cluster.as_ref().map_or(cfg.tasks, |c| c.first_release()),
        ));
        Chaos {
            cfg,
            log_dir,
            procs,
            next_kill: Instant::now() + kill_interval(cfg, &mut rng),
            rng,
            relay_kills: 0,
            worker_kills: 0,
            unexpected: 0,
            broker_restarts: 0,
            restart_at,
            cluster,
            release,
            kills: Vec::new(),
            last_completed: 0,
        }
    }

    /// One step of every fault source: the cluster's, the processes', the broker's.
    /// `stuck`: nothing has been left to deliver for a while, although fewer
    /// tasks completed than were released (a broken protocol lost some).
    async fn tick(
        &mut self,
        rig: &mut Rig,
        broker: &Broker,
        completed: u64,
        ready: Duration,
        stuck: bool,
    ) -> Result<(), RunError> {
        if let (Some(cc), Rig::Cluster(c)) = (self.cluster.as_mut(), &mut *rig) {
            cc.tick(c, broker, completed, stuck, &self.release).await?;
        }
        let busy = completed > self.last_completed;
        self.last_completed = completed;
        self.processes(busy).await?;
        self.broker_restart(rig, completed, ready).await
    }

    /// Restarts what exited by itself, and kills the next victim when due:
    /// at the first tick in which tasks completed (`busy`), so that the
    /// victim is most likely in the middle of a message, or after
    /// [`KILL_BUSY_WAIT_MS`] without one.
    async fn processes(&mut self, busy: bool) -> Result<(), RunError> {
        for p in self.procs.iter_mut() {
            if let Ok(Some(status)) = p.child.try_wait() {
                self.unexpected += 1;
                tracing::warn!(proc = %p.cfg.name, %status, "process exited by itself; restarting");
                *p = spawn_proc(self.cfg, &p.cfg, &self.log_dir)?;
            }
        }
        let cluster_busy = self.cluster.as_ref().is_some_and(|c| !c.is_idle());
        let now = Instant::now();
        if !self.cfg.process_kills || now < self.next_kill || cluster_busy {
            return Ok(());
        }
        if !busy && now < self.next_kill + Duration::from_millis(KILL_BUSY_WAIT_MS) {
            return Ok(());
        }
        // On the cluster the first two kills are a relay's and a worker's, so
        // every seed's table has both kinds; then victims are drawn.
        let victim = match (self.cluster.is_some(), self.relay_kills, self.worker_kills) {
            (true, 0, _) => 0,
            (true, _, 0) => 1,
            _ => self.rng.random_range(0..self.procs.len()),
        };
        let p = &mut self.procs[victim];
        let at_ms = unix_ms();
        if kill_confirmed(&mut p.child, &p.cfg.name).await? {
            let kind = match p.cfg.role {
                Role::Relay => {
                    self.relay_kills += 1;
                    FaultKind::RelayKill
                }
                Role::Worker => {
                    self.worker_kills += 1;
                    FaultKind::WorkerKill
                }
            };
            self.kills.push(FaultRecord {
                kind,
                at_ms,
                target: p.cfg.name.clone(),
                confirmed: "signal: 9 (SIGKILL)".into(),
                restored: true,
                down_ms: 0,
                new_leader_ms: None,
            });
        } else {
            self.unexpected += 1;
        }
        *p = spawn_proc(self.cfg, &p.cfg, &self.log_dir)?;
        self.next_kill = Instant::now() + kill_interval(self.cfg, &mut self.rng);
        Ok(())
    }

    /// The one broker restart of a run on one node.
    async fn broker_restart(
        &mut self,
        rig: &mut Rig,
        completed: u64,
        ready: Duration,
    ) -> Result<(), RunError> {
        let Rig::One(s) = rig else { return Ok(()) };
        if !self.cfg.process_kills || self.broker_restarts > 0 || completed < self.restart_at {
            return Ok(());
        }
        let status = s.nats.kill().await?;
        if status.signal() != Some(9) {
            return Err(RunError::KillUnconfirmed {
                name: "nats-server".into(),
                status: status.to_string(),
            });
        }
        s.nats.restart(ready).await?;
        self.broker_restarts += 1;
        Ok(())
    }
}

/// No more kills: lets the survivors drain the outbox and the consumer
/// (three quiet reads in a row, at most a minute).
async fn drain(store: &Store, broker: &Broker) {
    let quiet_deadline = Instant::now() + Duration::from_secs(60);
    let mut quiet = 0;
    while quiet < 3 && Instant::now() < quiet_deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        quiet = if is_quiet(store, broker).await {
            quiet + 1
        } else {
            0
        };
    }
}

/// The tasks in etcd (a repeated create makes none).
async fn tasks_created(store: &Store) -> u64 {
    store.count(&store.keys().tasks()).await.unwrap_or(0)
}

/// Whether nothing is left to do: no pending intent, nothing undelivered,
/// nothing awaiting an ACK.
async fn is_quiet(store: &Store, broker: &Broker) -> bool {
    let pending = store.count(&store.keys().outboxes()).await;
    let cs = broker.consumer_state().await;
    matches!((pending, cs), (Ok(0), Ok(cs)) if cs.undelivered == 0 && cs.ack_pending == 0)
}

/// Runs the load. `Err` when the run cannot be carried out; a broken
/// invariant is a report with `passed: false`.
pub async fn run(cfg: &RunConfig) -> Result<RunReport, RunError> {
    cfg.validate()?;
    let ready = Duration::from_millis(cfg.limits.server_ready_timeout_ms);
    let (mut rig, endpoints) = Rig::start(cfg, ready).await?;
    let mut own_dir = tempfile::Builder::new()
        .prefix("courier-relay-run-")
        .tempdir()
        .map_err(|e| spawn_error("log directory", e.to_string()))?;
    if cfg.keep_dir {
        rig.keep_dir();
        own_dir.disable_cleanup(rig.dir().is_none());
    }
    let log_dir = rig.dir().unwrap_or(own_dir.path()).to_path_buf();
    let events_dir = log_dir.join("events");
    std::fs::create_dir_all(&events_dir)
        .map_err(|e| spawn_error("events directory", e.to_string()))?;
    let template = proc_template(cfg, endpoints, &events_dir)?;
    let keys = Keys::new(&template.namespace).map_err(|e| RunError::Config(e.to_string()))?;
    let store = Store::connect(&template.endpoints.etcd, keys.clone(), &template.limits).await?;
    let names = Names::new(&keys);
    let broker = Broker::connect(&template.endpoints.nats, names.clone(), &template.limits).await?;
    ensure_stream(&broker, &template.limits, ready).await?;
    let procs = spawn_all(cfg, &template, &log_dir)?;
    let mut chaos = Chaos::new(cfg, log_dir, procs, &rig, &names.stream);
    let report = match drive(cfg, &mut rig, &store, &broker, &mut chaos).await {
        Ok((elapsed, repeats)) => {
            judge(cfg, &store, &broker, &chaos, &events_dir, elapsed, repeats).await
        }
        Err(e) => Err(e),
    };
    let report = report.map(|r| RunReport {
        kept_dir: cfg.keep_dir.then(|| chaos.log_dir.clone()),
        ..r
    });
    if cfg.endpoints.is_some() {
        let _ = broker.delete_stream().await;
        let _ = store.delete_namespace().await;
    }
    drop(rig);
    report
}

/// Creates the stream and its consumer, retrying while a just-started
/// cluster still has a peer it does not see ("no suitable peers for
/// placement"), up to the servers' ready time-out.
async fn ensure_stream(
    broker: &Broker,
    limits: &RelayLimits,
    ready: Duration,
) -> Result<(), RunError> {
    let start = Instant::now();
    loop {
        match broker.ensure(limits).await {
            Err(e) if start.elapsed() < ready => {
                tracing::warn!(error = %e, "stream not created yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            r => return Ok(r?),
        }
    }
}

/// What every relay and worker process of the run shares: its servers, a
/// namespace of its own, the limits (stream replicas 3 on the cluster).
fn proc_template(
    cfg: &RunConfig,
    endpoints: Endpoints,
    events_dir: &Path,
) -> Result<ProcConfig, RunError> {
    let mut limits = cfg.limits.clone();
    if cfg.cluster {
        limits.stream_replicas = 3;
    }
    let namespace = format!(
        "run-{:x}-{}",
        cfg.seed & 0xffff_ffff_ffff,
        std::process::id()
    );
    Ok(ProcConfig {
        role: Role::Relay,
        name: String::new(),
        endpoints,
        namespace,
        limits,
        seed: 0,
        protocol: cfg.protocol,
        events_dir: Some(events_dir.to_path_buf()),
    })
}

/// One relay and `cfg.workers` workers, each with its own seed.
fn spawn_all(
    cfg: &RunConfig,
    template: &ProcConfig,
    log_dir: &Path,
) -> Result<Vec<Proc>, RunError> {
    let relay = ProcConfig {
        name: "relay#1".into(),
        ..template.clone()
    };
    let mut procs = vec![spawn_proc(cfg, &relay, log_dir)?];
    for w in 1..=cfg.workers {
        let worker = ProcConfig {
            role: Role::Worker,
            name: format!("worker#{w}"),
            seed: cfg.seed.wrapping_add(u64::from(w)),
            ..template.clone()
        };
        procs.push(spawn_proc(cfg, &worker, log_dir)?);
    }
    Ok(procs)
}

fn spawn_error(name: &str, reason: String) -> RunError {
    RunError::Spawn {
        name: name.into(),
        reason,
    }
}

/// Ticks (of 100 ms) with nothing left to deliver after which the run
/// stops waiting for tasks a broken protocol lost.
const QUIET_TICKS: u32 = 30;

/// What the run's loop has seen so far.
#[derive(Debug, Default)]
struct Progress {
    completed: u64,
    /// Consecutive ticks with nothing left to deliver while tasks the run
    /// waits for are missing.
    quiet_ticks: u32,
}

enum Verdict {
    Go,
    /// Every task completed (or a broken protocol lost some for good).
    Done,
}

impl Progress {
    fn stuck(&self) -> bool {
        self.quiet_ticks >= QUIET_TICKS
    }

    /// Reads the results and decides whether the run is over. A broken
    /// protocol can lose tasks: once nothing is left to deliver for 3 s,
    /// the run stops (all created) or the next fault goes on (short of the
    /// tasks released before it).
    async fn update(
        &mut self,
        store: &Store,
        broker: &Broker,
        chaos: &Chaos<'_>,
        created: bool,
    ) -> Verdict {
        if let Ok(n) = store.count(&store.keys().results()).await {
            self.completed = n;
        }
        let faults_done = chaos.cluster.as_ref().is_none_or(ClusterChaos::is_done);
        if created && faults_done && self.completed >= chaos.cfg.tasks {
            return Verdict::Done;
        }
        let release = chaos.release.load(Ordering::SeqCst);
        let waiting = if faults_done {
            created
        } else {
            self.completed < release && tasks_created(store).await >= release
        };
        self.quiet_ticks = if waiting && is_quiet(store, broker).await {
            self.quiet_ticks + 1
        } else {
            0
        };
        if created && faults_done && self.stuck() {
            return Verdict::Done;
        }
        Verdict::Go
    }
}

/// Creates the tasks and injects the faults until every task has its result
/// (or nothing is left to do), then lets the survivors drain. Returns the
/// time from the first create to the last result, and the repeated creates.
async fn drive(
    cfg: &RunConfig,
    rig: &mut Rig,
    store: &Store,
    broker: &Broker,
    chaos: &mut Chaos<'_>,
) -> Result<(Duration, Vec<RepeatedCreate>), RunError> {
    let ready = Duration::from_millis(cfg.limits.server_ready_timeout_ms);
    let started = Instant::now();
    let creator_done = Arc::new(AtomicBool::new(false));
    let creator = tokio::spawn(create_all(
        store.clone(),
        cfg.clone(),
        amounts(cfg.seed, cfg.tasks, cfg.amount_max),
        creator_done.clone(),
        chaos.release.clone(),
    ));
    let bar = progress_bar(cfg);
    let deadline = started + Duration::from_secs(cfg.deadline_s);
    let mut progress = Progress::default();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let created = creator_done.load(Ordering::SeqCst);
        let verdict = progress.update(store, broker, chaos, created).await;
        show_progress(&bar, &progress, chaos, started);
        if matches!(verdict, Verdict::Done) {
            break;
        }
        // The creator sets its flag before it returns, so the flag is read
        // again here, after `is_finished`: the one read at the top of this
        // tick may predate a creator that finished since.
        let failed = creator.is_finished() && !creator_done.load(Ordering::SeqCst);
        if Instant::now() > deadline || failed {
            bar.abandon();
            return Err(stopped_early(cfg, &progress, creator, failed).await);
        }
        let (completed, stuck) = (progress.completed, progress.stuck());
        chaos.tick(rig, broker, completed, ready, stuck).await?;
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    drain(store, broker).await;
    for p in chaos.procs.iter_mut() {
        let _ = kill_confirmed(&mut p.child, &p.cfg.name).await;
    }
    let repeats = creator
        .await
        .map_err(|e| RunError::Config(format!("creator panicked: {e}")))??;
    Ok((elapsed, repeats))
}

/// Why the loop ended before the run did: its deadline, or the creator's
/// failure.
async fn stopped_early(
    cfg: &RunConfig,
    progress: &Progress,
    creator: tokio::task::JoinHandle<Result<Vec<RepeatedCreate>, RunError>>,
    creator_failed: bool,
) -> RunError {
    if !creator_failed {
        return RunError::Deadline {
            deadline_s: cfg.deadline_s,
            completed: progress.completed,
            tasks: cfg.tasks,
        };
    }
    match creator.await {
        Ok(Err(e)) => e,
        _ => RunError::Config("the creator stopped early".into()),
    }
}

fn show_progress(
    bar: &indicatif::ProgressBar,
    progress: &Progress,
    chaos: &Chaos<'_>,
    started: Instant,
) {
    bar.set_position(progress.completed.min(chaos.cfg.tasks));
    bar.set_message(format!(
        "{:.0}/s; kills: relay {}, workers {}; cluster faults {}",
        progress.completed as f64 / started.elapsed().as_secs_f64().max(1e-3),
        chaos.relay_kills,
        chaos.worker_kills,
        chaos.cluster.as_ref().map_or(0, |c| c.records.len()),
    ));
}

/// The tasks the run creates, and the counter they must sum to.
fn expected_tasks(cfg: &RunConfig) -> (Vec<ExpectedTask>, u64) {
    let amounts = amounts(cfg.seed, cfg.tasks, cfg.amount_max);
    let expected = amounts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let task_id = task_id(i as u64);
            ExpectedTask {
                event_id: crate::model::event_id_for(&task_id),
                task_id,
                amount: *a,
            }
        })
        .collect();
    (expected, amounts.iter().sum())
}

/// Every fault in time order, the table of the kinds the run was to
/// inject, and why that table fails a cluster run.
fn fault_report(
    cfg: &RunConfig,
    chaos: &Chaos<'_>,
    events: &[(u64, EventKind)],
    copies_at_ms: &[u64],
) -> (Vec<FaultRecord>, Vec<KindRow>, Vec<String>) {
    let mut faults: Vec<FaultRecord> = chaos.kills.clone();
    if let Some(c) = &chaos.cluster {
        faults.extend(c.records.iter().cloned());
    }
    faults.sort_by_key(|f| f.at_ms);
    let cluster_faults = cfg.cluster && cfg.cluster_rounds > 0;
    let mut kinds = Vec::new();
    if cluster_faults {
        kinds.extend(FaultKind::CLUSTER);
    }
    if cfg.process_kills {
        kinds.extend([FaultKind::RelayKill, FaultKind::WorkerKill]);
    }
    let table = faults::table(&kinds, &faults, events, copies_at_ms);
    // A cluster run must show every kind it was to inject.
    let failures = if cluster_faults {
        faults::table_failures(&table)
    } else {
        Vec::new()
    };
    (faults, table, failures)
}

/// Reads what the run left behind and judges it.
async fn judge(
    cfg: &RunConfig,
    store: &Store,
    broker: &Broker,
    chaos: &Chaos<'_>,
    events_dir: &Path,
    elapsed: Duration,
    repeats: Vec<RepeatedCreate>,
) -> Result<RunReport, RunError> {
    let (expected, expected_counter) = expected_tasks(cfg);
    let mut obs = store.observe().await?;
    let census = broker.census(Duration::from_secs(120)).await?;
    let consumer = broker.consumer_state().await?;
    obs.stream_copies = census.copies.clone();
    obs.ack_pending = consumer.ack_pending;
    obs.repeated_creates = repeats;
    let violations = check(&expected, &obs);
    let effects = effects_verdict(&expected, &obs);
    let events = events::read_all(events_dir);
    let (faults, fault_table, table_failures) =
        fault_report(cfg, chaos, &events, &census.extra_copies_at_ms);
    let count = |k: EventKind| events.iter().filter(|e| e.1 == k).count() as u64;
    let passed = violations.is_empty()
        && obs.counter == expected_counter
        && obs.results.len() as u64 == cfg.tasks
        && table_failures.is_empty();
    Ok(RunReport {
        seed: cfg.seed,
        tasks: cfg.tasks,
        workers: cfg.workers,
        cluster: cfg.cluster,
        protocol: cfg.protocol,
        elapsed_ms: elapsed.as_millis() as u64,
        tasks_per_s: cfg.tasks as f64 / elapsed.as_secs_f64().max(1e-9),
        relay_kills: chaos.relay_kills,
        worker_kills: chaos.worker_kills,
        unexpected_exits: chaos.unexpected,
        broker_restarts: chaos.broker_restarts,
        repeated_creates: obs.repeated_creates.len() as u64,
        stream_messages: census.messages,
        extra_copies: census.messages.saturating_sub(cfg.tasks),
        deliveries: consumer.delivered,
        dedup_records: obs.dedup.len() as u64,
        results: obs.results.len() as u64,
        counter: obs.counter,
        expected_counter,
        effects,
        redeliveries: count(EventKind::Redelivery),
        suppressed: count(EventKind::Suppress),
        dedup_retention_ms: cfg.limits.dedup_retention_ms,
        dedup_window_min_ms: cfg.limits.dedup_window_min_ms(),
        faults,
        fault_table,
        table_failures,
        passed,
        violations,
        kept_dir: None,
    })
}

/// Lost and doubled effects, told apart: tasks without a result, and
/// amounts the counter holds beyond the results it has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// Tasks created and never completed.
    pub lost_tasks: u64,
    /// Their amounts.
    pub lost_amount: u64,
    /// Counter minus the sum of the completed results: applied more than once.
    pub doubled_amount: u64,
}

impl Effects {
    pub fn verdict(&self) -> String {
        match (self.lost_tasks > 0, self.doubled_amount > 0) {
            (false, false) => "every effect once".into(),
            (true, false) => format!(
                "LOST: {} tasks never applied (amount {})",
                self.lost_tasks, self.lost_amount
            ),
            (false, true) => format!("DOUBLED: {} applied more than once", self.doubled_amount),
            (true, true) => format!(
                "LOST and DOUBLED: {} tasks never applied (amount {}), {} applied more than once",
                self.lost_tasks, self.lost_amount, self.doubled_amount
            ),
        }
    }
}

fn effects_verdict(expected: &[ExpectedTask], obs: &crate::check::Observation) -> Effects {
    let lost: Vec<&ExpectedTask> = expected
        .iter()
        .filter(|t| !obs.results.contains_key(&t.task_id))
        .collect();
    let results_sum: u64 = obs.results.values().map(|r| r.amount).sum();
    Effects {
        lost_tasks: lost.len() as u64,
        lost_amount: lost.iter().map(|t| t.amount).sum(),
        doubled_amount: obs.counter.saturating_sub(results_sum),
    }
}

fn task_id(i: u64) -> String {
    format!("t{i:07}")
}

fn kill_interval(cfg: &RunConfig, rng: &mut StdRng) -> Duration {
    Duration::from_millis(rng.random_range(cfg.kill_interval_min_ms..=cfg.kill_interval_max_ms))
}

fn progress_bar(cfg: &RunConfig) -> indicatif::ProgressBar {
    if !cfg.progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(cfg.tasks);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} tasks completed, {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Creates every task (some requests twice), `create_concurrency_max` at a time.
async fn create_all(
    store: Store,
    cfg: RunConfig,
    amounts: Vec<u64>,
    done: Arc<AtomicBool>,
    release: Arc<AtomicU64>,
) -> Result<Vec<RepeatedCreate>, RunError> {
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed);
    let items: Vec<(u64, u64, bool)> = amounts
        .into_iter()
        .enumerate()
        .map(|(i, a)| (i as u64, a, rng.random_range(0..100) < cfg.repeat_percent))
        .collect();
    let limits = cfg.limits.clone();
    let results: Vec<Result<Option<RepeatedCreate>, RunError>> = futures::stream::iter(items)
        .map(move |(i, amount, repeat)| {
            let (store, limits, release) = (store.clone(), limits.clone(), release.clone());
            async move {
                // On the cluster, tasks are released a share per fault.
                while i >= release.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                create_one(store, limits, i, amount, repeat).await
            }
        })
        .buffer_unordered(cfg.create_concurrency_max as usize)
        .collect()
        .await;
    let mut repeats = Vec::new();
    for r in results {
        if let Some(rep) = r? {
            repeats.push(rep);
        }
    }
    done.store(true, Ordering::SeqCst);
    Ok(repeats)
}

/// Creates task `i`, and when `repeat`, sends the same request again with
/// the fresh task id a client would propose.
async fn create_one(
    store: Store,
    limits: RelayLimits,
    i: u64,
    amount: u64,
    repeat: bool,
) -> Result<Option<RepeatedCreate>, RunError> {
    let req = CreateRequest {
        idempotency_key: format!("req-{i}"),
        amount,
    };
    let id = task_id(i);
    let first = create_retrying(&store, &req, &id, &limits).await?;
    if !repeat {
        return Ok(None);
    }
    let again = create_retrying(&store, &req, &format!("{id}-again"), &limits).await?;
    Ok(Some(RepeatedCreate {
        idempotency_key: req.idempotency_key,
        first_task_id: first.task_id,
        repeat_task_id: again.task_id,
        repeat_wrote: again.created,
    }))
}

/// Retries a create through unknown outcomes with the same key and task id:
/// the create's compare makes each retry safe.
async fn create_retrying(
    store: &Store,
    req: &CreateRequest,
    task_id: &str,
    limits: &RelayLimits,
) -> Result<protocol::Created, RunError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match protocol::create(Protocol::Reference, store, req, task_id, limits).await {
            Err(CreateError::Store(e)) if e.is_unknown() && attempt < 20 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r => return Ok(r?),
        }
    }
}

/// The run's summary, for people.
pub fn render(r: &RunReport) -> String {
    let mut out = format!(
        "tasks {} with {} workers in {:.1} s: {:.0} tasks/s end to end\n\
         kills: relay {}, workers {} (all confirmed SIGKILL); unexpected exits {}; broker restarts {}\n\
         stream messages {} ({} extra copies), deliveries {}, repeated create requests {}\n\
         results {}, dedup records {}, counter {} (expected {})\n",
        r.tasks,
        r.workers,
        r.elapsed_ms as f64 / 1000.0,
        r.tasks_per_s,
        r.relay_kills,
        r.worker_kills,
        r.unexpected_exits,
        r.broker_restarts,
        r.stream_messages,
        r.extra_copies,
        r.deliveries,
        r.repeated_creates,
        r.results,
        r.dedup_records,
        r.counter,
        r.expected_counter,
    );
    if r.cluster {
        out.push_str(&format!(
            "cluster: 3 etcd members, 3 nats-servers (stream replicas 3, sync_interval always); protocol {}\n",
            r.protocol.as_str()
        ));
    }
    out.push_str(&format!("effects: {}\n", r.effects.verdict()));
    out.push_str(&format!(
        "dedup records kept >= {:.1} h (no copy can arrive later than {:.1} h after the first apply): \
         {} redeliveries, {} suppressed, all within {:.1} s of the start\n",
        r.dedup_retention_ms as f64 / 3.6e6,
        r.dedup_window_min_ms as f64 / 3.6e6,
        r.redeliveries,
        r.suppressed,
        r.elapsed_ms as f64 / 1000.0,
    ));
    if !r.faults.is_empty() || r.cluster {
        out.push_str(&faults::render_table(&r.fault_table));
    }
    for f in &r.table_failures {
        out.push_str(&format!("FAIL {f}\n"));
    }
    // Each broken invariant once with a count, then a few examples of each.
    for inv in crate::check::Invariant::ALL {
        let hits: Vec<&Violation> = r.violations.iter().filter(|v| v.invariant == inv).collect();
        if hits.is_empty() {
            continue;
        }
        out.push_str(&format!("VIOLATED {} ({}x):\n", inv.as_str(), hits.len()));
        for v in hits.iter().take(3) {
            out.push_str(&format!("  {}\n", v.detail));
        }
    }
    out.push_str(if r.passed {
        "all invariants held\n"
    } else {
        "some invariants FAILED\n"
    });
    if let Some(dir) = &r.kept_dir {
        out.push_str(&format!("run directory kept at {}\n", dir.display()));
    }
    out
}
