//! `courier relay`: the etcd + NATS JetStream relay. `lab` runs the three
//! crash scenarios for one protocol; `run` pushes N tasks through relay and
//! worker processes that are killed at random moments. The work lives in
//! `courier_relay`; this file parses flags and prints.

use anyhow::{bail, Context};
use courier_relay::lab::{self, Endpoints, LabConfig};
use courier_relay::run::{self as relay_run, ProcConfig, RunConfig};
use courier_relay::Protocol;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Run the crash scenarios against real etcd and JetStream and check the shared invariants.
    Lab(LabArgs),
    /// Push N tasks through relay and worker processes killed at random moments, with one broker
    /// restart; with --cluster, on 3 etcd members and 3 JetStream servers whose leaders are killed.
    Run(RunArgs),
    /// Relay throughput without faults: one etcd and one nats-server, then the
    /// 3+3 cluster (stream replicas 3, sync_interval always), same tasks and seed.
    Compare(CompareArgs),
    /// A relay process of `run` (internal).
    #[command(hide = true)]
    RelayProc(ProcArgs),
    /// A worker process of `run` (internal).
    #[command(hide = true)]
    WorkerProc(ProcArgs),
}

#[derive(clap::Args)]
struct ServerArgs {
    /// Use these etcd endpoints (comma-separated) instead of starting etcd.
    #[arg(long, value_delimiter = ',', requires = "nats_url")]
    etcd_endpoints: Vec<String>,
    /// Use this nats-server (with JetStream) instead of starting one; a
    /// cluster's servers may be listed comma-separated.
    #[arg(long, requires = "etcd_endpoints")]
    nats_url: Option<String>,
}

impl ServerArgs {
    fn endpoints(&self) -> Option<Endpoints> {
        self.nats_url.as_ref().map(|nats| Endpoints {
            etcd: self.etcd_endpoints.clone(),
            nats: nats.clone(),
        })
    }
}

#[derive(clap::Args)]
struct LabArgs {
    /// `all`, unpublished-outbox, lost-publish-ack or lost-consumer-ack.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// reference, starter, ack-before-commit, no-dedup or mark-before-ack.
    #[arg(long, default_value = "reference")]
    protocol: String,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// The consumer's AckWait (how soon a lost consumer ACK is redelivered).
    #[arg(long, default_value_t = 1_000)]
    ack_wait_ms: u64,
    #[command(flatten)]
    servers: ServerArgs,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Tasks to create and complete.
    #[arg(long, default_value_t = 10_000)]
    tasks: u64,
    /// Seed of amounts, repeats and the kill schedule (random when absent; printed first).
    #[arg(long)]
    seed: Option<u64>,
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Pause between two kills, drawn from [min, max] ms.
    #[arg(long, default_value_t = 300)]
    kill_min_ms: u64,
    #[arg(long, default_value_t = 1_500)]
    kill_max_ms: u64,
    /// The consumer's AckWait.
    #[arg(long, default_value_t = 2_000)]
    ack_wait_ms: u64,
    /// Give up after this long.
    #[arg(long, default_value_t = 900)]
    deadline_s: u64,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Start 3 etcd members and 3 nats-servers (stream replicas 3) and kill,
    /// stop and restart their leaders and followers during the run.
    #[arg(long, conflicts_with_all = ["etcd_endpoints", "nats_url"])]
    cluster: bool,
    /// With --cluster: how many times each cluster fault kind is injected (0: none).
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Do not kill relay and worker processes (nor restart the one broker):
    /// on the cluster, only the cluster's faults.
    #[arg(long)]
    no_process_kills: bool,
    /// reference, or a broken protocol as a negative control: ack-before-commit, no-dedup, mark-before-ack.
    #[arg(long, default_value = "reference")]
    protocol: String,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Keep the run's directory (server data and logs, the relay's and
    /// workers' logs and event files) and print where it is.
    #[arg(long)]
    keep_dir: bool,
    #[command(flatten)]
    servers: ServerArgs,
}

#[derive(clap::Args)]
struct CompareArgs {
    /// Tasks per setup.
    #[arg(long, default_value_t = 5_000)]
    tasks: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 2)]
    workers: u32,
}

#[derive(clap::Args)]
struct ProcArgs {
    /// The process's configuration, as JSON.
    #[arg(long)]
    config: String,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Lab(a) => lab(a).await,
        Command::Run(a) => load(a).await,
        Command::Compare(a) => compare(a).await,
        Command::RelayProc(a) | Command::WorkerProc(a) => {
            let cfg: ProcConfig = serde_json::from_str(&a.config).context("reading --config")?;
            relay_run::run_proc(cfg).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn lab(a: LabArgs) -> anyhow::Result<ExitCode> {
    let protocol: Protocol = a.protocol.parse()?;
    let scenarios = lab::parse_scenarios(&a.scenario)?;
    let mut cfg = LabConfig::new(protocol, scenarios);
    cfg.endpoints = a.servers.endpoints();
    cfg.limits.ack_wait_ms = a.ack_wait_ms;
    let report = lab::run_lab(&cfg).await?;
    print!("{}", lab::render(&report));
    if let Some(path) = &a.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn load(a: RunArgs) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!("seed: {seed}");
    if a.servers.endpoints().is_some() {
        println!("using existing servers: the broker is not restarted");
    }
    let exe = std::env::current_exe()
        .context("finding this binary to start relay and worker processes")?;
    let mut cfg = RunConfig::new(a.tasks, seed, exe, vec!["relay".into()]);
    cfg.workers = a.workers;
    cfg.endpoints = a.servers.endpoints();
    cfg.kill_interval_min_ms = a.kill_min_ms;
    cfg.kill_interval_max_ms = a.kill_max_ms;
    cfg.limits.ack_wait_ms = a.ack_wait_ms;
    cfg.deadline_s = a.deadline_s;
    cfg.progress = !a.no_progress;
    cfg.cluster = a.cluster;
    cfg.cluster_rounds = a.rounds;
    cfg.process_kills = !a.no_process_kills;
    cfg.protocol = a.protocol.parse()?;
    cfg.keep_dir = a.keep_dir;
    if cfg.tasks == 0 {
        bail!("--tasks must be positive");
    }
    let Some(report) = until_signal(relay_run::run(&cfg)).await? else {
        return Ok(ExitCode::from(130));
    };
    print!("{}", relay_run::render(&report));
    if let Some(path) = &a.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs `run` until it ends, or until SIGTERM or Ctrl-C (`None`): then the
/// run is dropped, which kills its servers and processes and removes its
/// directories.
async fn until_signal<T>(
    run: impl std::future::Future<Output = Result<T, relay_run::RunError>>,
) -> anyhow::Result<Option<T>> {
    let stop = super::common::shutdown_on_signal();
    tokio::select! {
        r = run => Ok(Some(r?)),
        _ = stop.cancelled() => {
            eprintln!("interrupted: the run's servers and processes are killed, its directories removed");
            Ok(None)
        }
    }
}

/// One node against the cluster, no faults, in one invocation.
async fn compare(a: CompareArgs) -> anyhow::Result<ExitCode> {
    println!("seed: {}", a.seed);
    let exe = std::env::current_exe().context("finding this binary")?;
    let mut rows = Vec::new();
    for cluster in [false, true] {
        let mut cfg = RunConfig::new(a.tasks, a.seed, exe.clone(), vec!["relay".into()]);
        cfg.workers = a.workers;
        cfg.cluster = cluster;
        cfg.cluster_rounds = 0;
        cfg.process_kills = false;
        cfg.progress = false;
        let Some(r) = until_signal(relay_run::run(&cfg)).await? else {
            return Ok(ExitCode::from(130));
        };
        if !r.passed {
            print!("{}", relay_run::render(&r));
            bail!(
                "the {} run failed its checks",
                if cluster { "cluster" } else { "one-node" }
            );
        }
        rows.push((cluster, r));
    }
    println!("| setup | tasks | workers | elapsed s | tasks/s | stream copies | counter exact |");
    println!("|---|---|---|---|---|---|---|");
    for (cluster, r) in &rows {
        let setup = if *cluster {
            "3 etcd + 3 nats-server (R3, sync always)"
        } else {
            "1 etcd + 1 nats-server (R1)"
        };
        println!(
            "| {setup} | {} | {} | {:.1} | {:.0} | {} | {} |",
            r.tasks,
            r.workers,
            r.elapsed_ms as f64 / 1000.0,
            r.tasks_per_s,
            r.extra_copies,
            r.counter == r.expected_counter
        );
    }
    Ok(ExitCode::SUCCESS)
}
