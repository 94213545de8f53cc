//! `courier demo`: the whole courier on one machine. It starts the managed
//! PostgreSQL (a fresh `courier_demo` database in it), the flaky provider with
//! its faults on, the server and several worker processes; enqueues actions
//! across stores through the API; shows progress by state; waits until every
//! action has its final status; then verifies the provider's log. Flags and
//! output only; the run is `courier_rig::demo`.

use super::common::DbArgs;
use anyhow::Context;
use courier_rig::demo::{fresh_dir, Demo, DemoConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 2000)]
    actions: usize,
    #[arg(long, default_value_t = 100)]
    stores: usize,
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Seed of the provider's faults (printed first; the same seed replays them).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    db: DbArgs,
    /// Where logs and the provider's log go (cleared first).
    #[arg(long, default_value = ".courier/demo")]
    run_dir: PathBuf,
    /// Give up after this long.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// Print the verifier's report as JSON at the end.
    #[arg(long)]
    json: bool,
    /// Leave the managed PostgreSQL running when the demo started it
    /// (by default the demo stops a cluster it started, and leaves one that
    /// was already running as it was).
    #[arg(long)]
    keep_db: bool,
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    println!("courier demo: seed {}", a.seed);
    let started = Instant::now();
    let dir = fresh_dir(&a.run_dir)?;
    let db = a.db.open().await?;
    // A cluster this demo started is stopped on every way out, unless kept.
    let mut db_guard = StopIfStarted::new(&db, a.keep_db);
    let url = courier_store::database_recreate(&db.url, "courier_demo")
        .await
        .context("creating the demo database")?;
    println!("PostgreSQL: {}", super::common::redact(&url));
    let exe = std::env::current_exe().context("locating the courier binary")?;
    let cfg = DemoConfig {
        actions: a.actions,
        stores: a.stores,
        workers: a.workers,
        seed: a.seed,
        run_dir: dir.clone(),
        timeout_s: a.timeout_s,
    };
    let demo = Demo::start(&exe, cfg, &url).await?;
    println!(
        "server {} · provider {} (faults on) · {} workers",
        demo.api(),
        demo.provider_url(),
        a.workers
    );
    let outcome = demo.run().await?;
    if let Some(line) = &outcome.progress_line {
        println!("{line}");
    }
    let elapsed = outcome.finished_at - started;
    println!();
    print!("{}", outcome.report.table());
    println!();
    println!("{}", summary_line(&a, elapsed, &outcome));
    println!("logs and the provider's log: {}", dir.display());
    // Stopped before the line that says so.
    let stopped = db_guard.stop_now();
    println!("{}", db_fate(&db, &a, stopped));
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome.report.to_json())?
        );
    }
    if !outcome.finished {
        eprintln!(
            "not every action reached a final status within {} s",
            a.timeout_s
        );
        return Ok(ExitCode::from(1));
    }
    Ok(if outcome.report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The line under the table: the run's size, time, attempts, lookups, events.
fn summary_line(a: &Args, elapsed: Duration, outcome: &courier_rig::demo::DemoOutcome) -> String {
    let summary = &outcome.summary;
    format!(
        "{} actions across {} stores in {:.1} s · attempts {} · lookups {} · events: {}",
        a.actions,
        a.stores,
        elapsed.as_secs_f64(),
        summary.attempts_total,
        outcome.report.stats.lookup_lines,
        summary
            .events
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Stops the managed cluster on drop, when this process started it and it
/// is not to be kept.
struct StopIfStarted(Option<courier_store::cluster::Cluster>);

impl StopIfStarted {
    fn new(db: &super::common::Db, keep: bool) -> Self {
        StopIfStarted(db.cluster.clone().filter(|_| db.started_here && !keep))
    }

    /// Stops the cluster now (once); the error, if it would not stop.
    fn stop_now(&mut self) -> Result<(), String> {
        match self.0.take() {
            Some(c) => c
                .stop(courier_store::cluster::StopMode::Fast)
                .map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

impl Drop for StopIfStarted {
    fn drop(&mut self) {
        if let Err(e) = self.stop_now() {
            eprintln!("warning: could not stop the demo's PostgreSQL: {e}");
        }
    }
}

/// The last line: what becomes of the PostgreSQL the demo used.
fn db_fate(db: &super::common::Db, a: &Args, stopped: Result<(), String>) -> String {
    let Some(c) = &db.cluster else {
        return "PostgreSQL: the server you named (--database-url) is left as it was".into();
    };
    let dir = c.dir().display();
    let stop = format!("courier db stop{}", a.db.pg.flag_hint());
    match (db.started_here, a.keep_db, stopped) {
        (true, false, Ok(())) => format!(
            "PostgreSQL under {dir}: stopped (the demo started it; --keep-db leaves it running)"
        ),
        (true, false, Err(e)) => {
            format!("PostgreSQL under {dir} could not be stopped ({e}); stop it with `{stop}`")
        }
        (true, true, _) => {
            format!("PostgreSQL under {dir} still runs (--keep-db); stop it with `{stop}`")
        }
        (false, _, _) => format!(
            "PostgreSQL under {dir} still runs, as it did before the demo; stop it with `{stop}`"
        ),
    }
}
