//! `courier demo`: the whole courier on one machine. It starts the managed
//! PostgreSQL (a fresh `courier_demo` database in it), the flaky provider with
//! its faults on, the server and several worker processes; enqueues actions
//! across stores through the API; shows progress by state; waits until every
//! action has its final status; then verifies the provider's log.

use super::common::DbArgs;
use crate::{args, harness};
use anyhow::Context;
use courier_provider::verify::{verify_reader, Expectation, ReadLimits};
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
}

const API_KEY: &str = "demo-api-key";
const SECRET: &str = "demo-webhook-secret";

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    println!("courier demo: seed {}", a.seed);
    let started = Instant::now();
    let dir = harness::run_dir(&a.run_dir)?;
    let server_url = a.db.url().await?;
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
    pub fn finish(&self) {
        for (_, b) in &self.bars {
            b.finish();
        }
    }
}

/// Adds one bar per state to `mp`.
pub fn watch_line(mp: &MultiProgress, total: usize) -> Bars {
    let style = ProgressStyle::with_template("{prefix:>11} {bar:40.cyan/blue} {pos:>6}/{len}")
        .expect("static template");
    let bars = ["pending", "claimed", "dispatched", "done", "failed"]
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
    while Instant::now() < deadline {
        match store.summary(1800).await {
            Ok(s) => {
                bars.update(&s);
                let final_count = s.state("done") + s.state("failed");
                if s.total() as usize >= total && final_count as usize >= total {
                    finished = true;
                    break;
                }
            }
            Err(e) => tracing::warn!(error = %e, "progress: cannot read the store"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bars.finish();
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
) -> anyhow::Result<courier_provider::verify::Report> {
    let expected = expectations(store).await?;
    let file = std::fs::File::open(log).with_context(|| format!("opening {}", log.display()))?;
    Ok(verify_reader(
        std::io::BufReader::new(file),
        &ReadLimits::default(),
        Some(&expected),
    )?)
}
