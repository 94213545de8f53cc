//! `courier db start | stop | status | url`: the managed local PostgreSQL.

use super::common::PgDirArg;
use anyhow::Context;
use courier_store::cluster::{Cluster, StopMode};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    pg: PgDirArg,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Start the cluster (initialising it on first use) and apply migrations.
    Start,
    /// Stop the cluster.
    Stop {
        /// Crash it instead (`pg_ctl stop -m immediate`).
        #[arg(long)]
        immediate: bool,
    },
    /// Say whether it runs, and where.
    Status,
    /// Print its connection URL (starting it if needed).
    Url,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let pg_dir = args.pg.dir()?;
    let cluster = Cluster::new(&pg_dir);
    let dir = pg_dir.display().to_string();
    match args.action {
        Action::Start | Action::Url => {
            let start = args.action_is_start();
            let c = cluster.clone();
            let url = tokio::task::spawn_blocking(move || c.start())
                .await?
                .with_context(|| format!("starting the managed PostgreSQL under {dir}"))?;
            courier_store::PgStore::connect(&courier_store::StoreConfig::new(&url))
                .await
                .context("applying migrations")?;
            if start {
                println!("PostgreSQL running under {dir}: {url}");
            } else {
                println!("{url}");
            }
        }
        Action::Stop { immediate } => {
            let mode = if immediate {
                StopMode::Immediate
            } else {
                StopMode::Fast
            };
            tokio::task::spawn_blocking(move || cluster.stop(mode)).await??;
            println!("PostgreSQL under {dir} stopped");
        }
        Action::Status => {
            let port = tokio::task::spawn_blocking(move || cluster.running_port()).await??;
            match port {
                Some(p) => println!("running under {dir}: {}", Cluster::url_for_port(p)),
                None => {
                    println!("not running (under {dir})");
                    return Ok(ExitCode::from(1));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

impl Args {
    fn action_is_start(&self) -> bool {
        matches!(self.action, Action::Start)
    }
}
