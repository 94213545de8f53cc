//! `courier bench history | soak | live-migration`: the long-life
//! benchmarks (issue 18). Flags in, figures out; the work is in
//! `courier-bench` (`history`, `soak`, `live_migration`).

use courier_bench::history::{self, HistoryConfig};
use courier_bench::live_migration::{self, LiveMigrationConfig};
use courier_bench::soak::{self, SoakConfig};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct HistoryArgs {
    /// Finished actions seeded with SQL (default 10000000; 20000 with --smoke).
    #[arg(long)]
    actions: Option<i64>,
    /// Actions claimed, settled and merged per path and round (default 100000: rounds of 20,000 took 3 s and measured start-up more than the path).
    #[arg(long)]
    backlog: Option<u32>,
    /// Pairs of rounds, one on each database, the pair's order alternating; each round starts after a checkpoint (default 3; 2 with --smoke).
    #[arg(long)]
    rounds: Option<u32>,
    /// Keep the cluster here and reuse a database seeded by an earlier run.
    #[arg(long)]
    pg_dir: Option<PathBuf>,
    /// Drop the seeded database at the end (gives its disk back).
    #[arg(long)]
    drop: bool,
    #[arg(long)]
    json: bool,
    /// Seconds, a tiny history: checks that everything runs, judges nothing.
    #[arg(long)]
    smoke: bool,
}

pub async fn run_history(a: HistoryArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = if a.smoke {
        HistoryConfig::smoke()
    } else {
        HistoryConfig::new()
    };
    if let Some(v) = a.actions {
        cfg.actions = v;
    }
    if let Some(v) = a.backlog {
        cfg.backlog = v;
    }
    if let Some(v) = a.rounds {
        cfg.rounds = v;
    }
    cfg.pg_dir = a.pg_dir;
    cfg.drop_after = a.drop;
    cfg.progress = !a.json && !a.smoke;
    eprintln!(
        "courier bench history: {} finished actions seeded with SQL; synchronous_commit=off; {} worker(s) x {}, backlog {} per path; load average {}",
        cfg.actions, cfg.workers, cfg.concurrency, cfg.backlog, courier_bench::cpu::load_average()
    );
    let report = history::run(&cfg).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct SoakArgs {
    /// The measured span, after a warm-up of one retention and a minute (default 1800).
    #[arg(long)]
    duration_s: Option<u64>,
    /// Offer this rate instead of probing the capacity.
    #[arg(long)]
    rate_per_s: Option<f64>,
    /// The share of the probed capacity offered (default 0.65).
    #[arg(long)]
    utilisation: Option<f64>,
    /// Worker processes (default 2).
    #[arg(long)]
    workers: Option<u32>,
    /// Record the statements' time per third (pg_stat_statements, when the server has it):
    /// what the database did more of if the last third cost more. Costs the server some time.
    #[arg(long)]
    statements: bool,
    /// Where to write the SVG chart.
    #[arg(long, default_value = ".courier/bench/soak.svg")]
    chart: PathBuf,
    #[arg(long)]
    json: bool,
    /// Seconds, tiny windows: checks that everything runs, judges nothing.
    #[arg(long)]
    smoke: bool,
}

pub async fn run_soak(a: SoakArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let mut cfg = if a.smoke {
        SoakConfig::smoke(exe)
    } else {
        SoakConfig::new(exe)
    };
    if let Some(v) = a.duration_s {
        cfg.duration_s = v;
    }
    if let Some(v) = a.utilisation {
        cfg.utilisation = v;
    }
    if let Some(v) = a.workers {
        cfg.workers = v;
    }
    cfg.rate_per_s = a.rate_per_s;
    cfg.statements = a.statements;
    cfg.progress = !a.json && !a.smoke;
    cfg.validate().map_err(anyhow::Error::msg)?;
    eprintln!(
        "courier bench soak: {} s measured after a warm-up; retention: actions {} s, provider keys {} s, event ids {} s (horizon {} s), events {} s; {} worker processes; load average {}",
        cfg.duration_s, cfg.action_retention_s, cfg.key_retention_s, cfg.webhook_event_retention_s,
        cfg.webhook_retry_horizon_s, cfg.event_retention_s, cfg.workers, courier_bench::cpu::load_average()
    );
    let report = soak::run(&cfg).await?;
    courier_bench::soak_chart::draw(&report, &a.chart)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
        println!(
            "chart: {} · wall time {:.0} s",
            a.chart.display(),
            report.wall_time_s
        );
    }
    Ok(if report.passed || a.smoke {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(clap::Args)]
pub struct LiveMigrationArgs {
    /// Finished actions in the database (default 1000000).
    #[arg(long, default_value_t = 1_000_000)]
    actions: i64,
    /// The negative control: the live migrations' statements without CONCURRENTLY, in one
    /// transaction under the lock that creating migrations 13's and 15's triggers takes.
    #[arg(long)]
    blocking: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run_live_migration(a: LiveMigrationArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = LiveMigrationConfig::new(a.actions);
    cfg.blocking = a.blocking;
    eprintln!(
        "courier bench live-migration: {} finished actions, {} pending, {} enqueued during; load average {}",
        cfg.actions, cfg.backlog, cfg.enqueued_during, courier_bench::cpu::load_average()
    );
    let report = live_migration::run_own_cluster(&cfg).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
