//! The lab: three crash scenarios against real etcd and JetStream, judged by
//! the shared checker, for any protocol.
//!
//! Each scenario creates the tasks with amounts 2, 3 and 5 (and repeats the
//! first request), injects its fault, restarts the component that "died",
//! waits until the system is quiet (outbox empty, nothing undelivered,
//! nothing awaiting an ACK), and then reads everything back. The relay and
//! the workers run in this process, each with its own connections, so a
//! "crash" drops its connections like a dead process would.
//!
//! # Invariants
//! - The assertions are the same for every protocol: [`crate::check::check`].
//! - A fault hook fires only because the lab passed it to a constructor.

use crate::broker::{Broker, BrokerError, Names};
use crate::check::{check, ExpectedTask, Observation, RepeatedCreate, Violation};
use crate::limits::RelayLimits;
use crate::model::{CreateRequest, Keys, Protocol};
use crate::protocol::{self, CreateError};
use crate::relay::{Relay, RelayFault};
use crate::servers::{Binaries, ServerError, Servers};
use crate::store::{Store, StoreError};
use crate::trace::{self, Step, Trace};
use crate::worker::{Worker, WorkerError, WorkerExit, WorkerFault};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The amounts of the lab's three tasks: the counter ends at 10.
pub const AMOUNTS: [u64; 3] = [2, 3, 5];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Committed outbox, no publication yet: the relay dies just before publishing.
    UnpublishedOutbox,
    /// The publish ACK is lost: two copies in the stream, one effect.
    LostPublishAck,
    /// Committed result, lost consumer ACK: redelivery is suppressed.
    LostConsumerAck,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [
        Scenario::UnpublishedOutbox,
        Scenario::LostPublishAck,
        Scenario::LostConsumerAck,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::UnpublishedOutbox => "unpublished-outbox",
            Scenario::LostPublishAck => "lost-publish-ack",
            Scenario::LostConsumerAck => "lost-consumer-ack",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Scenario::UnpublishedOutbox => "committed outbox, no publication yet",
            Scenario::LostPublishAck => "lost publish ACK",
            Scenario::LostConsumerAck => "committed result, lost consumer ACK",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scenario {0:?}: expected all, unpublished-outbox, lost-publish-ack or lost-consumer-ack")]
pub struct UnknownScenario(pub String);

impl FromStr for Scenario {
    type Err = UnknownScenario;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| UnknownScenario(s.to_string()))
    }
}

/// Parses `all` or one scenario name.
pub fn parse_scenarios(s: &str) -> Result<Vec<Scenario>, UnknownScenario> {
    if s == "all" {
        Ok(Scenario::ALL.to_vec())
    } else {
        Ok(vec![s.parse()?])
    }
}

/// Servers to use instead of starting our own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    pub etcd: Vec<String>,
    pub nats: String,
}

#[derive(Debug, Clone)]
pub struct LabConfig {
    pub protocol: Protocol,
    pub scenarios: Vec<Scenario>,
    /// `None`: start etcd and nats-server for the lab.
    pub endpoints: Option<Endpoints>,
    pub binaries: Binaries,
    pub limits: RelayLimits,
    /// How long a scenario may take to become quiet after its fault.
    pub settle_timeout_ms: u64,
}

impl LabConfig {
    pub fn new(protocol: Protocol, scenarios: Vec<Scenario>) -> Self {
        LabConfig {
            protocol,
            scenarios,
            endpoints: None,
            binaries: Binaries::default(),
            limits: RelayLimits::lab(),
            settle_timeout_ms: 20_000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Servers(#[from] ServerError),
    #[error(transparent)]
    Limits(#[from] crate::limits::LimitsError),
    #[error("the lab needs at least one scenario")]
    NoScenario,
}

/// Why a scenario could not run to its checks.
#[derive(Debug, thiserror::Error)]
enum Stop {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Create(#[from] CreateError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error("{0}")]
    Other(String),
}

/// One task's event chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    pub task_id: String,
    pub entries: Vec<trace::Entry>,
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioReport {
    pub scenario: Scenario,
    pub title: String,
    pub protocol: Protocol,
    pub passed: bool,
    /// Why the scenario stopped before its checks (infrastructure, or a step not written).
    pub error: Option<String>,
    pub tasks: u64,
    pub stream_messages: u64,
    /// Deliveries as the broker counts them (consumer sequence).
    pub deliveries: u64,
    /// Deliveries whose delivery count was above 1, as the workers saw them.
    pub redeliveries: u64,
    pub commits: u64,
    pub suppressed: u64,
    pub acks: u64,
    pub publish_attempts: u64,
    pub dedup_records: u64,
    pub results: u64,
    pub counter: u64,
    pub expected_counter: u64,
    pub pending_outbox: u64,
    pub ack_pending: u64,
    /// Copies of each event in the stream.
    pub copies: BTreeMap<String, u64>,
    /// What the fault left behind, observed right after it.
    pub evidence: Vec<String>,
    pub violations: Vec<Violation>,
    pub chain: Option<Chain>,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabReport {
    pub protocol: Protocol,
    pub passed: bool,
    pub scenarios: Vec<ScenarioReport>,
}

/// Runs the chosen scenarios and reports on each. `Err` only when the lab
/// itself cannot start (servers, limits); a failing scenario is a report.
pub async fn run_lab(cfg: &LabConfig) -> Result<LabReport, LabError> {
    cfg.limits.validate()?;
    if cfg.scenarios.is_empty() {
        return Err(LabError::NoScenario);
    }
    let ready = Duration::from_millis(cfg.limits.server_ready_timeout_ms);
    let (servers, endpoints) = match &cfg.endpoints {
        Some(e) => (None, e.clone()),
        None => {
            let s = Servers::start(&cfg.binaries, ready).await?;
            let e = Endpoints {
                etcd: vec![s.etcd.endpoint.clone()],
                nats: s.nats.url.clone(),
            };
            (Some(s), e)
        }
    };
    let mut reports = Vec::new();
    for (i, scenario) in cfg.scenarios.iter().enumerate() {
        let ns = namespace(i);
        reports.push(run_scenario(cfg, *scenario, &endpoints, &ns).await);
    }
    drop(servers);
    Ok(LabReport {
        protocol: cfg.protocol,
        passed: reports.iter().all(|r| r.passed),
        scenarios: reports,
    })
}

fn namespace(i: usize) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("lab{i}-{}-{nanos:x}", std::process::id())
}

/// Connections and names of one scenario.
struct Env<'a> {
    cfg: &'a LabConfig,
    endpoints: &'a Endpoints,
    keys: Keys,
    names: Names,
    trace: Trace,
}

impl Env<'_> {
    async fn store(&self) -> Result<Store, Stop> {
        Ok(Store::connect(&self.endpoints.etcd, self.keys.clone(), &self.cfg.limits).await?)
    }
    async fn broker(&self) -> Result<Broker, Stop> {
        Ok(Broker::connect(&self.endpoints.nats, self.names.clone(), &self.cfg.limits).await?)
    }
    async fn relay(&self, name: &str, fault: Option<RelayFault>) -> Result<Relay, Stop> {
        Ok(Relay::new(
            self.store().await?,
            self.broker().await?,
            self.cfg.protocol.relay_order(),
            self.cfg.limits.clone(),
            name,
            Some(self.trace.clone()),
            fault,
        ))
    }
    async fn worker(
        &self,
        name: &str,
        fault: Option<WorkerFault>,
        seed: u64,
    ) -> Result<Worker, Stop> {
        Ok(Worker::new(
            self.store().await?,
            self.broker().await?,
            self.cfg.protocol,
            self.cfg.limits.clone(),
            name,
            Some(self.trace.clone()),
            fault,
            seed,
        ))
    }
}

/// What a scenario produced before its checks.
#[derive(Default)]
struct Run {
    expected: Vec<ExpectedTask>,
    repeats: Vec<RepeatedCreate>,
    evidence: Vec<String>,
}

async fn run_scenario(
    cfg: &LabConfig,
    scenario: Scenario,
    endpoints: &Endpoints,
    ns: &str,
) -> ScenarioReport {
    let started = Instant::now();
    let keys = Keys::new(ns).expect("lab namespaces are valid names");
    let env = Env {
        cfg,
        endpoints,
        names: Names::new(&keys),
        keys,
        trace: Trace::default(),
    };
    let mut run = Run::default();
    let outcome = drive(&env, scenario, &mut run).await;
    let mut report = ScenarioReport {
        scenario,
        title: scenario.title().to_string(),
        protocol: cfg.protocol,
        passed: false,
        error: None,
        tasks: run.expected.len() as u64,
        stream_messages: 0,
        deliveries: 0,
        redeliveries: 0,
        commits: 0,
        suppressed: 0,
        acks: 0,
        publish_attempts: 0,
        dedup_records: 0,
        results: 0,
        counter: 0,
        expected_counter: AMOUNTS.iter().sum(),
        pending_outbox: 0,
        ack_pending: 0,
        copies: BTreeMap::new(),
        evidence: std::mem::take(&mut run.evidence),
        violations: Vec::new(),
        chain: None,
        elapsed_ms: 0,
    };
    if let Err(e) = outcome {
        report.error = Some(e.to_string());
    }
    // Read back whatever the run left, even after an error, for the report.
    match observe(&env, &run).await {
        Ok((obs, delivered)) => {
            report.stream_messages = obs.stream_copies.values().sum();
            report.deliveries = delivered;
            report.dedup_records = obs.dedup.len() as u64;
            report.results = obs.results.len() as u64;
            report.counter = obs.counter;
            report.pending_outbox = obs.pending_outbox.len() as u64;
            report.ack_pending = obs.ack_pending;
            report.copies = obs.stream_copies.clone();
            if report.error.is_none() {
                report.violations = check(&run.expected, &obs);
            }
        }
        Err(e) if report.error.is_none() => {
            report.error = Some(format!("reading the results back: {e}"))
        }
        Err(_) => {}
    }
    let entries = env.trace.entries();
    let c = trace::counts(&entries);
    report.redeliveries = c.redeliveries;
    report.commits = c.commits;
    report.suppressed = c.suppressions;
    report.acks = c.acks;
    report.publish_attempts = c.publish_attempts;
    if let Some(first) = run.expected.first() {
        let chain = env.trace.chain(&first.task_id);
        report.chain = Some(Chain {
            task_id: first.task_id.clone(),
            lines: chain.iter().map(trace::describe).collect(),
            entries: chain,
        });
    }
    report.passed = report.error.is_none() && report.violations.is_empty();
    if cfg.endpoints.is_some() {
        cleanup(&env).await;
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    report
}

async fn cleanup(env: &Env<'_>) {
    if let Ok(b) = env.broker().await {
        let _ = b.delete_stream().await;
    }
    if let Ok(s) = env.store().await {
        let _ = s.delete_namespace().await;
    }
}

async fn observe(env: &Env<'_>, run: &Run) -> Result<(Observation, u64), Stop> {
    let store = env.store().await?;
    let broker = env.broker().await?;
    let mut obs = store.observe().await?;
    let census = broker.census(Duration::from_secs(10)).await?;
    let consumer = broker.consumer_state().await?;
    obs.stream_copies = census.copies;
    obs.ack_pending = consumer.ack_pending;
    obs.repeated_creates = run.repeats.clone();
    Ok((obs, consumer.delivered))
}

async fn drive(env: &Env<'_>, scenario: Scenario, run: &mut Run) -> Result<(), Stop> {
    let store = env.store().await?;
    let broker = env.broker().await?;
    broker.ensure(&env.cfg.limits).await?;
    create_tasks(env, &store, run).await?;

    match scenario {
        Scenario::UnpublishedOutbox => {
            let mut relay = env
                .relay("relay#1", Some(RelayFault::CrashBeforePublish))
                .await?;
            let pass = relay.pass().await?;
            drop(relay);
            if !pass.crashed {
                return Err(Stop::Other("the relay's crash hook did not fire".into()));
            }
            run.evidence.push(format!(
                "after the relay crash: {} in etcd, {} in the stream",
                count(store.count(&env.keys.outboxes()).await?, "pending intent"),
                count(broker.stream_messages().await?, "message"),
            ));
            let relay = env.relay("relay#2", None).await?;
            settle(env, &store, &broker, relay, "worker#1", 1).await?;
        }
        Scenario::LostPublishAck => {
            let mut relay = env
                .relay("relay#1", Some(RelayFault::LoseFirstPublishAck))
                .await?;
            let pass = relay.pass().await?;
            if pass.unknown == 0 {
                return Err(Stop::Other("the lost-ACK hook did not fire".into()));
            }
            run.evidence.push(format!(
                "after the first pass: {} in the stream, {} still pending (the ACK of {} never arrived)",
                count(broker.stream_messages().await?, "message"),
                count(store.count(&env.keys.outboxes()).await?, "intent"),
                run.expected.first().map(|t| t.task_id.as_str()).unwrap_or("?"),
            ));
            // The same relay goes on: its next pass publishes t1 again.
            settle(env, &store, &broker, relay, "worker#1", 1).await?;
        }
        Scenario::LostConsumerAck => {
            let mut relay = env.relay("relay#1", None).await?;
            relay.pass().await?;
            drop(relay);
            let mut worker = env
                .worker("worker#1", Some(WorkerFault::ExitAfterFirstStep), 1)
                .await?;
            let exit = tokio::time::timeout(
                Duration::from_millis(env.cfg.settle_timeout_ms),
                worker.run(CancellationToken::new()),
            )
            .await
            .map_err(|_| Stop::Other("worker#1 received nothing to crash on".into()))??;
            drop(worker);
            if exit != WorkerExit::Crashed {
                return Err(Stop::Other("the worker's crash hook did not fire".into()));
            }
            let obs = store.observe().await?;
            let cs = broker.consumer_state().await?;
            run.evidence.push(format!(
                "after the worker crash: counter {}, {}, {} awaiting its ACK",
                obs.counter,
                count(obs.dedup.len() as u64, "dedup record"),
                count(cs.ack_pending, "message"),
            ));
            let relay = env.relay("relay#2", None).await?;
            settle(env, &store, &broker, relay, "worker#2", 2).await?;
        }
    }
    Ok(())
}

fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

async fn create_tasks(env: &Env<'_>, store: &Store, run: &mut Run) -> Result<(), Stop> {
    let protocol = env.cfg.protocol;
    for (i, amount) in AMOUNTS.iter().enumerate() {
        let req = CreateRequest {
            idempotency_key: format!("req-{}", i + 1),
            amount: *amount,
        };
        let task_id = format!("t{}", i + 1);
        let created = protocol::create(protocol, store, &req, &task_id, &env.cfg.limits).await?;
        env.trace.record(
            "creator",
            &created.task_id,
            Step::Created {
                idempotency_key: req.idempotency_key.clone(),
            },
        );
        run.expected.push(ExpectedTask {
            task_id: created.task_id,
            event_id: created.event_id,
            amount: *amount,
        });
    }
    // The first request again, as a client whose answer was lost would send
    // it, with the fresh task id it would propose.
    let req = CreateRequest {
        idempotency_key: "req-1".into(),
        amount: AMOUNTS[0],
    };
    let before = store.revision().await?;
    let again = protocol::create(protocol, store, &req, "t1-repeat", &env.cfg.limits).await?;
    let after = store.revision().await?;
    env.trace.record(
        "creator",
        &again.task_id,
        Step::CreateRepeated {
            idempotency_key: req.idempotency_key.clone(),
        },
    );
    run.repeats.push(RepeatedCreate {
        idempotency_key: req.idempotency_key,
        first_task_id: run.expected[0].task_id.clone(),
        repeat_task_id: again.task_id,
        repeat_wrote: after != before,
    });
    Ok(())
}

/// Runs a relay and a fresh worker until the system is quiet: no pending
/// intent, nothing undelivered, nothing awaiting an ACK, three polls in a row.
async fn settle(
    env: &Env<'_>,
    store: &Store,
    broker: &Broker,
    mut relay: Relay,
    worker_name: &str,
    seed: u64,
) -> Result<(), Stop> {
    let stop = CancellationToken::new();
    let relay_name = relay.name().to_string();
    let mut worker = env.worker(worker_name, None, seed).await?;
    let relay_stop = stop.clone();
    let worker_stop = stop.clone();
    let relay_task = tokio::spawn(async move { relay.run(relay_stop).await });
    let mut worker_task = tokio::spawn(async move { worker.run(worker_stop).await });
    let deadline = Instant::now() + Duration::from_millis(env.cfg.settle_timeout_ms);
    let mut quiet = 0;
    let mut worker_done = None;
    while quiet < 3 {
        if Instant::now() > deadline {
            // Not an error of the lab: the checker reports what is left.
            tracing::warn!("the scenario did not become quiet in time");
            break;
        }
        tokio::select! {
            joined = &mut worker_task => {
                worker_done = Some(joined);
                break;
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        // A failed poll counts as "not quiet"; the deadline bounds the wait.
        let pending = store.count(&env.keys.outboxes()).await;
        let cs = broker.consumer_state().await;
        match (pending, cs) {
            (Ok(0), Ok(cs)) if cs.undelivered == 0 && cs.ack_pending == 0 => quiet += 1,
            _ => quiet = 0,
        }
    }
    stop.cancel();
    let joined = match worker_done {
        Some(j) => j,
        None => worker_task.await,
    };
    let mut result = match joined {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Stop::from(e)),
        Err(e) => Err(Stop::Other(format!("{worker_name} panicked: {e}"))),
    };
    match relay_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => result = result.and(Err(e.into())),
        Err(e) => result = result.and(Err(Stop::Other(format!("{relay_name} panicked: {e}")))),
    }
    result
}

/// The report as a table and chains, for people.
pub fn render(report: &LabReport) -> String {
    let mut out = String::new();
    out.push_str(&format!("protocol: {}\n\n", report.protocol));
    out.push_str(&format!(
        "{:<20} {:>6} {:>6} {:>8} {:>6} {:>6} {:>7} {:>8}  {}\n",
        "scenario", "stream", "deliv", "redeliv", "suppr", "dedup", "results", "counter", "verdict"
    ));
    for s in &report.scenarios {
        out.push_str(&format!(
            "{:<20} {:>6} {:>6} {:>8} {:>6} {:>6} {:>7} {:>8}  {}\n",
            s.scenario.as_str(),
            s.stream_messages,
            s.deliveries,
            s.redeliveries,
            s.suppressed,
            s.dedup_records,
            s.results,
            format!("{}/{}", s.counter, s.expected_counter),
            if s.passed { "ok" } else { "FAILED" }
        ));
    }
    for s in &report.scenarios {
        out.push_str(&format!("\n== {} ({})\n", s.scenario, s.title));
        for e in &s.evidence {
            out.push_str(&format!("   {e}\n"));
        }
        if let Some(e) = &s.error {
            out.push_str(&format!("   stopped: {e}\n"));
        }
        for v in &s.violations {
            out.push_str(&format!("   VIOLATED {}: {}\n", v.invariant, v.detail));
        }
        if let Some(c) = &s.chain {
            out.push_str(&format!("   event chain of {}:\n", c.task_id));
            for l in &c.lines {
                out.push_str(&format!("   {l}\n"));
            }
        }
    }
    out.push_str(&format!(
        "\n{}\n",
        if report.passed {
            "all invariants held"
        } else {
            "some invariants FAILED"
        }
    ));
    out
}
