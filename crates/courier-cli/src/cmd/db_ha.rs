//! `courier db ha up | down | status`: a local highly available PostgreSQL
//! (3 etcd members, Patroni with a primary and two standbys) on loopback
//! ports. Flags and output only; the cluster is `courier_rig::ha`.

use anyhow::Context;
use courier_rig::ha::{self, HaCluster, HaSettings};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// The cluster's directory. Default: `ha` beside the managed cluster's
    /// directory (see --pg-dir).
    #[arg(long, env = "COURIER_HA_DIR", global = true)]
    ha_dir: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Start it (stopping and removing whatever an earlier run left in its
    /// directory), wait for a leader with a synchronous standby, print the
    /// URL; the processes keep running after this command returns.
    Up {
        /// DEMONSTRATION ONLY: asynchronous replication (an acknowledged
        /// commit can be lost in a failover).
        #[arg(long)]
        asynchronous: bool,
    },
    /// Stop every process of the cluster and remove its directory.
    Down,
    /// Each node's role, state, timeline and lag (Patroni's `/cluster`).
    Status,
}

pub async fn run(args: Args, default_pg_dir: PathBuf) -> anyhow::Result<ExitCode> {
    let dir = match args.ha_dir {
        Some(d) => d,
        None => default_pg_dir
            .parent()
            .map(|p| p.join("ha"))
            .unwrap_or_else(|| "ha".into()),
    };
    match args.action {
        Action::Up { asynchronous } => up(dir, asynchronous).await,
        Action::Down => {
            let c = ha::clean(&dir).await?;
            if c.removed {
                println!(
                    "stopped {} processes; removed {}",
                    c.processes,
                    dir.display()
                );
            } else {
                println!("no cluster under {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Status => status(dir).await,
    }
}

async fn up(dir: PathBuf, asynchronous: bool) -> anyhow::Result<ExitCode> {
    let settings = if asynchronous {
        HaSettings::asynchronous()
    } else {
        HaSettings::synchronous()
    };
    let t0 = std::time::Instant::now();
    let c = HaCluster::up(&dir, settings, true)
        .await
        .with_context(|| format!("bringing the HA cluster up under {}", dir.display()))?;
    courier_store::PgStore::connect(&courier_store::StoreConfig::new(c.url()))
        .await
        .context("applying migrations")?;
    let p = c.ports();
    println!(
        "HA cluster up under {} in {:.1} s",
        dir.display(),
        t0.elapsed().as_secs_f64()
    );
    println!(
        "  etcd members on 127.0.0.1:{:?} (client ports)",
        p.etcd_client
    );
    println!(
        "  Patroni REST on 127.0.0.1:{:?}, PostgreSQL on 127.0.0.1:{:?}",
        p.rest, p.pg
    );
    println!(
        "  synchronous_mode {} (strict {}), ttl {} s, loop_wait {} s, retry_timeout {} s, maximum_lag_on_failover {} bytes",
        settings.synchronous, settings.synchronous, settings.ttl_s, settings.loop_wait_s,
        settings.retry_timeout_s, settings.maximum_lag_on_failover_bytes
    );
    println!(
        "  logs: {}",
        c.logs()
            .iter()
            .map(|l| l.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("  url: {}", c.url());
    println!("stop it with: courier db ha down{}", hint(&dir));
    Ok(ExitCode::SUCCESS)
}

fn hint(dir: &std::path::Path) -> String {
    format!(" --ha-dir {}", dir.display())
}

async fn status(dir: PathBuf) -> anyhow::Result<ExitCode> {
    let Some(ports) = ha::recorded_ports(&dir) else {
        println!("no cluster under {}", dir.display());
        return Ok(ExitCode::from(1));
    };
    let Some(view) = ha::Rest::new(&ports.rest).cluster().await else {
        println!(
            "no Patroni answers under {} (ports {:?})",
            dir.display(),
            ports.rest
        );
        return Ok(ExitCode::from(1));
    };
    println!("| node | role | state | port | timeline | lag |\n|---|---|---|---|---|---|");
    for m in &view.members {
        let lag = m
            .lag
            .as_ref()
            .map(|l| l.to_string())
            .unwrap_or_else(|| "-".into());
        let tl = m
            .timeline
            .map(|t| t.to_string())
            .unwrap_or_else(|| "-".into());
        println!(
            "| {} | {} | {} | {} | {tl} | {lag} |",
            m.name, m.role, m.state, m.port
        );
    }
    println!("url: {}", ports.url());
    Ok(ExitCode::SUCCESS)
}
