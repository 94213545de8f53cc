//! `courier db start | stop | status | url`: the managed local PostgreSQL;
//! `courier db migrate | prune` on it or on any server (`--database-url`);
//! `courier db ha up | down | status`: the local HA cluster (`db_ha`).

use super::common::{DbArgs, PgDirArg, RetentionArgs};
use anyhow::Context;
use courier_core::Limits;
use courier_store::cluster::{Cluster, StopMode};
use courier_store::PruneWindows;
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
    /// Apply the migrations the database lacks: the one way a live
    /// database is migrated (workers and servers only check the schema).
    Migrate {
        /// Use this PostgreSQL server instead of the managed cluster.
        #[arg(long, env = "DATABASE_URL")]
        database_url: Option<String>,
    },
    /// Remove what the retention windows allow, in batches, until nothing
    /// is left to remove, then fold the maintained counts (workers do this
    /// by themselves).
    Prune {
        #[arg(long, env = "DATABASE_URL")]
        database_url: Option<String>,
        /// The provider's key retention: no intent is removed within it.
        #[arg(long, default_value_t = Limits::default().key_retention_s)]
        key_retention_s: u64,
        #[command(flatten)]
        retention: RetentionArgs,
    },
    /// A local highly available PostgreSQL: 3 etcd members, Patroni with a
    /// primary and two synchronous-mode standbys (`up | down | status`).
    Ha(super::db_ha::Args),
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Migrate { database_url } => return migrate(db_args(database_url, &args.pg)).await,
        Action::Prune {
            database_url,
            key_retention_s,
            retention,
        } => return prune(db_args(database_url, &args.pg), key_retention_s, &retention).await,
        Action::Ha(ha) => return super::db_ha::run(ha, args.pg.dir()?).await,
        _ => {}
    }
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
        Action::Migrate { .. } | Action::Prune { .. } | Action::Ha(_) => {
            unreachable!("handled above")
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

fn db_args(database_url: Option<String>, pg: &PgDirArg) -> DbArgs {
    DbArgs {
        database_url,
        pg: pg.clone(),
    }
}

async fn migrate(db: DbArgs) -> anyhow::Result<ExitCode> {
    let store = db.connect_unchecked(1).await?;
    let before = std::time::Instant::now();
    let n = store.migrate().await.context("applying migrations")?;
    println!(
        "applied {n} migration(s) in {:.1} s; schema at version {}",
        before.elapsed().as_secs_f64(),
        courier_store::migrate::version_known()
    );
    Ok(ExitCode::SUCCESS)
}

async fn prune(db: DbArgs, key_retention_s: u64, r: &RetentionArgs) -> anyhow::Result<ExitCode> {
    let limits = Limits {
        key_retention_s,
        ..Limits::default()
    };
    let retention = r.retention(&limits)?;
    let store = db.connect(2).await?;
    let windows = PruneWindows::new(&retention, &limits);
    let before = std::time::Instant::now();
    let mut total = courier_store::Pruned::default();
    loop {
        match store.prune_batch(&windows).await? {
            Some(p) => {
                total.add(p);
                if !p.full(&windows) {
                    break;
                }
            }
            None => {
                println!(
                    "another process is pruning now (its advisory lock is held); try again later"
                );
                return Ok(ExitCode::from(1));
            }
        }
    }
    let folded = store.counts_fold().await?.unwrap_or(0);
    println!(
        "removed {} actions, {} intents, {} webhook event ids, {} events in {:.1} s; folded {folded} count deltas",
        total.actions,
        total.outbox,
        total.webhook_events,
        total.events,
        before.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

impl Args {
    fn action_is_start(&self) -> bool {
        matches!(self.action, Action::Start)
    }
}
