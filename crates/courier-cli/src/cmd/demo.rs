//! `courier demo`: the whole courier on one machine. It starts the managed
//! PostgreSQL (a fresh `courier_demo` database in it), the flaky provider with
//! its faults on, the server and several worker processes; enqueues actions
//! across stores through the API; shows progress by state; waits until every
//! action has its final status; then verifies the provider's log.

use super::common::DbArgs;
use crate::{args, harness};
use anyhow::Context;
use courier_verify::{verify_reader, Expectation, ReadLimits};
use courier_store::{PgStore, StoreConfig};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
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

const API_KEY: &str = "demo-api-key";
const SECRET: &str = "demo-webhook-secret";

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    println!("courier demo: seed {}", a.seed);
    let started = Instant::now();
    let dir = harness::run_dir(&a.run_dir)?;
    let db = a.db.open().await?;
    // A cluster this demo started is stopped on every way out, unless kept.
    let mut db_guard = StopIfStarted::new(&db, a.keep_db);
    let server_url = db.url.clone();
    let url = courier_store::database_recreate(&server_url, "courier_demo")
        .await
        .context("creating the demo database")?;
    let store = PgStore::connect(&StoreConfig::new(&url)).await?;
    println!("PostgreSQL: {}", super::common::redact(&url));

    let (server, api) = harness::spawn_service(
        "server",
        &args![
            "serve",
            "--database-url",
            url,
            "--listen",
            "127.0.0.1:0",
            "--webhook-secret",
            SECRET
        ],
        &dir.join("server.log"),
    )
    .await?;
    let log = dir.join("provider.jsonl");
    let (provider, provider_url) = harness::spawn_service(
        "provider",
        &args![
            "provider",
            "--listen",
            "127.0.0.1:0",
            "--log",
            log.display(),
            "--api-key",
            API_KEY,
            "--webhook-secret",
            SECRET,
            "--seed",
            a.seed
        ],
        &dir.join("provider.log"),
    )
    .await?;
    println!(
        "server {api} · provider {provider_url} (faults on) · {} workers",
        a.workers
    );
    let callback = format!("{api}/v1/webhooks/provider");
    let mut workers = Vec::new();
    for i in 0..a.workers {
        workers.push(harness::spawn_plain(
            &format!("worker-{i}"),
            &args![
                "worker",
                "--database-url",
                url,
                "--provider-url",
                provider_url,
                "--provider-api-key",
                API_KEY,
                "--callback-url",
                callback,
                "--seed",
                a.seed.wrapping_mul(1000).wrapping_add(i as u64)
            ],
            &dir.join(format!("worker-{i}.log")),
        )?);
    }

    enqueue_all(&api, a.actions, a.stores).await?;
    let finished = watch(&store, a.actions, Duration::from_secs(a.timeout_s)).await?;
    let elapsed = started.elapsed();

    for w in workers {
        w.stop(Duration::from_secs(10)).await?;
    }
    server.stop(Duration::from_secs(5)).await?;
    provider.stop(Duration::from_secs(5)).await?;

    let report = verify_against(&store, &log).await?;
    let summary = store.summary(1800).await?;
    println!();
    print!("{}", report.table());
    println!();
    println!(
        "{} actions across {} stores in {:.1} s · attempts {} · lookups {} · events: {}",
        a.actions,
        a.stores,
        elapsed.as_secs_f64(),
        summary.attempts_total,
        report.stats.lookup_lines,
        summary
            .events
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("logs and the provider's log: {}", dir.display());
    // Stopped before the line that says so.
    let stopped = db_guard.stop_now();
    println!("{}", db_fate(&db, &a, stopped));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    }
    if !finished {
        eprintln!(
            "not every action reached a final status within {} s",
            a.timeout_s
        );
        return Ok(ExitCode::from(1));
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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

/// Enqueues through the API, several requests at a time.
async fn enqueue_all(api: &str, actions: usize, stores: usize) -> anyhow::Result<()> {
    use futures::StreamExt;
    let http = reqwest::Client::new();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..actions)
        .map(|i| {
            let http = http.clone();
            let url = format!("{api}/v1/actions");
            async move {
                let body = serde_json::json!({
                    "store": format!("store-{:03}", i % stores.max(1)),
                    "to": format!("+1555{:07}", i),
                    "body": format!("Order {i} has shipped."),
                    "key": format!("order-{i}"),
                });
                let resp = http.post(&url).json(&body).send().await?;
                anyhow::ensure!(
                    resp.status().is_success(),
                    "enqueue {i}: {} {}",
                    resp.status(),
                    resp.text().await.unwrap_or_default()
                );
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Progress bars, one per action state.
pub struct Bars {
    bars: Vec<(&'static str, ProgressBar)>,
}

impl Bars {
    pub fn update(&self, s: &courier_store::Summary) {
        for (state, bar) in &self.bars {
            bar.set_position(s.state(state) as u64);
        }
    }
    /// Leaves every bar at its last count. (indicatif's `finish` would
    /// move each bar to its length: "failed 2000/2000" after no failure.)
    pub fn finish(&self) {
        for (_, b) in &self.bars {
            b.abandon();
        }
    }

    /// The counts as one plain line, for output that is not a terminal
    /// (where indicatif draws nothing) and for the record.
    pub fn line(s: &courier_store::Summary) -> String {
        STATES
            .iter()
            .map(|st| format!("{st} {}", s.state(st)))
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// The action states the bars show, in the order an action passes them.
const STATES: [&str; 5] = ["pending", "claimed", "dispatched", "done", "failed"];

/// Adds one bar per state to `mp`.
pub fn watch_line(mp: &MultiProgress, total: usize) -> Bars {
    // The counts come first and the bar takes what width is left, so a
    // narrow terminal still shows every count.
    let style =
        ProgressStyle::with_template("{prefix:>10} {pos:>6}/{len:<6} {wide_bar:.cyan/blue}")
            .expect("static template");
    let bars = STATES
        .into_iter()
        .map(|s| {
            let b = mp.add(ProgressBar::new(total as u64));
            b.set_style(style.clone());
            b.set_prefix(s);
            (s, b)
        })
        .collect();
    Bars { bars }
}

/// Shows progress by state until every action is final (or the time is up).
pub async fn watch(store: &PgStore, total: usize, timeout: Duration) -> anyhow::Result<bool> {
    let mp = MultiProgress::new();
    let bars = watch_line(&mp, total);
    let deadline = Instant::now() + timeout;
    let mut finished = false;
    let mut last = None;
    while Instant::now() < deadline {
        match store.summary(1800).await {
            Ok(s) => {
                bars.update(&s);
                let final_count = s.state("done") + s.state("failed");
                finished = s.total() as usize >= total && final_count as usize >= total;
                last = Some(s);
                if finished {
                    break;
                }
            }
            Err(e) => tracing::warn!(error = %e, "progress: cannot read the store"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bars.finish();
    if let Some(s) = &last {
        println!("{}", Bars::line(s));
    }
    Ok(finished)
}

/// What the courier's database says, in the verifier's terms.
pub async fn expectations(store: &PgStore) -> anyhow::Result<Vec<Expectation>> {
    Ok(store
        .action_outcomes()
        .await?
        .into_iter()
        .map(|o| Expectation {
            key: courier_core::action_key(&o.uid),
            action_id: o.action_id.to_string(),
            courier_final: o.final_status,
            refused: o.state == "failed",
        })
        .collect())
}

/// Verifies a provider log against the courier's database.
pub async fn verify_against(
    store: &PgStore,
    log: &std::path::Path,
) -> anyhow::Result<courier_verify::Report> {
    let expected = expectations(store).await?;
    let file = std::fs::File::open(log).with_context(|| format!("opening {}", log.display()))?;
    Ok(verify_reader(
        std::io::BufReader::new(file),
        &ReadLimits::default(),
        Some(&expected),
    )?)
}
