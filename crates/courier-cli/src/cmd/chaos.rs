//! `courier chaos`: a fault run of real processes, judged by the provider's log.
//!
//! It starts a throwaway PostgreSQL cluster, the flaky provider (unless an
//! external one is given), the server and worker processes; enqueues actions
//! (one store noisier than the rest); and while they are worked it SIGKILLs
//! random workers (confirming each death from the wait status) and starts
//! replacements, crash-restarts PostgreSQL, and freezes workers that hold
//! actions for longer than their lease. Then it verifies the provider's log
//! with the same code as `courier verify`.

use super::demo::{verify_against, watch_line};
use crate::{args, harness};
use anyhow::{bail, Context};
use courier_dispatch::broken::UnsafeResend;
use courier_store::cluster::{Cluster, StopMode};
use courier_store::{PgStore, StoreConfig};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use nix::sys::signal::Signal;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use std::collections::HashSet;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
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
    /// SIGKILLs of random workers while actions are worked.
    #[arg(long, default_value_t = 200)]
    kills: usize,
    /// PostgreSQL crash-restarts (`pg_ctl stop -m immediate`, then start).
    #[arg(long, default_value_t = 1)]
    pg_restarts: usize,
    /// SIGSTOPs of workers holding actions, longer than their lease.
    #[arg(long, default_value_t = 5)]
    freezes: usize,
    /// Seed of everything random in the run (random when not given; printed first).
    #[arg(long)]
    seed: Option<u64>,
    /// How much more the noisy store sends than each other store.
    #[arg(long, default_value_t = 10)]
    noisy_factor: usize,
    /// Actions each worker works on at once.
    #[arg(long, default_value_t = 16)]
    concurrency: u32,
    #[arg(long, default_value_t = 2_000)]
    lease_ttl_ms: u64,
    /// Actions arrive, and faults land, spread over this many seconds.
    #[arg(long, default_value_t = 60)]
    duration_s: u64,
    /// Write everything (table, counts, seed, timings) as JSON.
    #[arg(long)]
    report: Option<PathBuf>,
    /// DEMONSTRATION ONLY: run broken workers (no-lookup | new-key) to show
    /// that the verifier catches blind resends and duplicate messages.
    #[arg(long)]
    unsafe_resend: Option<UnsafeResend>,
    /// Use a provider that chaos did not start (any implementation of the contract).
    #[arg(long, requires_all = ["provider_log", "provider_api_key", "webhook_secret"])]
    provider_url: Option<String>,
    /// That provider's log (read after the run).
    #[arg(long)]
    provider_log: Option<PathBuf>,
    #[arg(long)]
    provider_api_key: Option<String>,
    #[arg(long)]
    webhook_secret: Option<String>,
    /// Give up after this long.
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Give up when no action became final for this long (after the span).
    #[arg(long, default_value_t = 120)]
    stall_s: u64,
    /// Keep the run directory (cluster, logs) instead of deleting it.
    /// (It is always kept when the run fails.)
    #[arg(long)]
    keep: bool,
}

/// What was done to the system, and what it absorbed.
#[derive(Debug, Default, Serialize)]
struct Done {
    kills_sent: usize,
    kills_confirmed: usize,
    pg_restarts: usize,
    freezes: usize,
    fenced_writes_refused: i64,
    lookups: u64,
    resends: u64,
    timeouts_seen: i64,
    duplicate_webhooks_absorbed: i64,
    backward_reports_ignored: i64,
    reclaims: i64,
}

#[derive(Serialize)]
struct ChaosReport<'a> {
    seed: u64,
    passed: bool,
    wall_time_s: f64,
    actions: usize,
    stores: usize,
    workers: usize,
    unsafe_resend: Option<UnsafeResend>,
    done: &'a Done,
    verify: serde_json::Value,
}

const API_KEY: &str = "chaos-api-key";
const SECRET: &str = "chaos-webhook-secret";

struct Fleet {
    procs: Vec<Option<harness::Proc>>,
    args: Vec<String>,
    dir: PathBuf,
    started: usize,
}

impl Fleet {
    fn spawn(&mut self, slot: usize, seed: u64) -> anyhow::Result<()> {
        let mut a = self.args.clone();
        a.extend(args!["--seed", seed]);
        let p = harness::spawn_plain(
            &format!("worker-{}", self.started),
            &a,
            &self.dir.join(format!("worker-{}.log", self.started)),
        )?;
        self.started += 1;
        self.procs[slot] = Some(p);
        Ok(())
    }
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or_else(|| rand::rng().random());
    println!("courier chaos: seed {seed} (replay with --seed {seed})");
    if let Some(mode) = a.unsafe_resend {
        println!("WARNING: --unsafe-resend {mode:?}: the workers are broken on purpose; the verifier must fail");
    }
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    // The run directory is kept when anything fails, for the post-mortem,
    // and removed after a passing run unless --keep.
    let dir = tempfile::Builder::new()
        .prefix("courier-chaos-")
        .tempdir()?
        .keep();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;

    // PostgreSQL, throwaway; stopped on every way out of this function.
    let cluster = Cluster::new(dir.join("pg"));
    let _pg_guard = StopOnDrop(cluster.clone());
    let c = cluster.clone();
    let url = tokio::task::spawn_blocking(move || c.start()).await??;
    let store = PgStore::connect(&StoreConfig::new(&url)).await?;

    // The server, the provider, the workers.
    let secret = a
        .webhook_secret
        .clone()
        .unwrap_or_else(|| SECRET.to_string());
    let (server, api) = harness::spawn_service(
        "server",
        &args![
            "serve",
            "--database-url",
            url,
            "--listen",
            "127.0.0.1:0",
            "--webhook-secret",
            secret
        ],
        &dir.join("server.log"),
    )
    .await?;
    let (provider, provider_url, log, api_key) = match &a.provider_url {
        Some(u) => (
            None,
            u.clone(),
            a.provider_log
                .clone()
                .context("--provider-log is required")?,
            a.provider_api_key
                .clone()
                .context("--provider-api-key is required")?,
        ),
        None => {
            let log = dir.join("provider.jsonl");
            let (p, u) = harness::spawn_service(
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
                    secret,
                    "--seed",
                    seed
                ],
                &dir.join("provider.log"),
            )
            .await?;
            (Some(p), u, log, API_KEY.to_string())
        }
    };
    let callback = format!("{api}/v1/webhooks/provider");
    let heartbeat = (a.lease_ttl_ms / 5).max(1);
    let timeout = (a.lease_ttl_ms / 2).max(1);
    let margin = (a.lease_ttl_ms / 5).max(1);
    let mut worker_args = args![
        "worker",
        "--database-url",
        url,
        "--provider-url",
        provider_url,
        "--provider-api-key",
        api_key,
        "--callback-url",
        callback,
        "--lease-ttl-ms",
        a.lease_ttl_ms,
        "--heartbeat-interval-ms",
        heartbeat,
        "--request-timeout-ms",
        timeout,
        "--send-margin-ms",
        margin,
        "--concurrency",
        a.concurrency,
        "--final-overdue-ms",
        5_000,
        // Pruning on, with webhook event ids kept 45 s (the fake retries
        // for under 35 s), so ids are pruned while faults land; actions and
        // events outlast the run: the judge reads them at the end.
        "--webhook-retry-horizon-s",
        40,
        "--webhook-event-retention-s",
        45,
        "--prune-interval-ms",
        500
    ]
    .to_vec();
    if let Some(mode) = a.unsafe_resend {
        // The workers build the broken provider wrapper (courier_dispatch::broken).
        worker_args.extend(args!["--unsafe-resend", mode.as_flag()]);
    }
    let mut fleet = Fleet {
        procs: (0..a.workers).map(|_| None).collect(),
        args: worker_args,
        dir: dir.clone(),
        started: 0,
    };
    for slot in 0..a.workers {
        fleet.spawn(slot, rng.random())?;
    }
    println!(
        "run dir {} · server {api} · provider {provider_url} · {} workers · lease {} ms",
        dir.display(),
        a.workers,
        a.lease_ttl_ms
    );

    // Actions arrive at a steady rate over the run, so there is always work
    // in hand when a fault lands; the faults are spread over the same span.
    let span = Duration::from_secs(a.duration_s.max(1));
    let enqueue = tokio::spawn(enqueue_weighted(
        api.clone(),
        a.actions,
        a.stores,
        a.noisy_factor,
        span,
        rng.random(),
    ));
    let t0 = Instant::now();
    let at = |frac: f64| t0 + span.mul_f64(frac.clamp(0.0, 1.0));
    let mut kill_times: Vec<Instant> = (0..a.kills)
        .map(|i| at((i as f64 + rng.random_range(0.1..0.9)) / a.kills.max(1) as f64))
        .collect();
    kill_times.sort();
    let restart_times: Vec<Instant> = (0..a.pg_restarts)
        .map(|i| at((i as f64 + 1.0) / (a.pg_restarts as f64 + 1.0)))
        .collect();
    let freeze_times: Vec<Instant> = (0..a.freezes)
        .map(|i| at((i as f64 + 0.3) / a.freezes.max(1) as f64))
        .collect();

    let mut done = Done::default();
    let mp = MultiProgress::new();
    let bars = watch_line(&mp, a.actions);
    let faults_bar = mp.add(ProgressBar::new_spinner());
    faults_bar
        .set_style(ProgressStyle::with_template("{prefix:>10} {msg}").expect("static template"));
    faults_bar.set_prefix("faults");
    let deadline = Instant::now() + Duration::from_secs(a.timeout_s);
    let mut frozen: Option<(usize, Instant)> = None;
    let mut finished = false;
    let total = a.actions as i64;
    let mut freeze_misses = 0usize;
    // A run whose final count stops moving is stalled (a broken worker's
    // actions may never settle): give up after this long without progress.
    let stall = if a.unsafe_resend.is_some() {
        Duration::from_secs(a.stall_s.min(10))
    } else {
        Duration::from_secs(a.stall_s)
    };
    let mut last_final = -1i64;
    let mut last_progress = Instant::now();
    while Instant::now() < deadline {
        let now = Instant::now();
        // Thaw a frozen worker once its lease has surely run out.
        if let Some((slot, until)) = frozen {
            if now >= until {
                if let Some(p) = &fleet.procs[slot] {
                    p.signal(Signal::SIGCONT)?;
                }
                frozen = None;
            }
        }
        // SIGKILLs, each confirmed from the wait status, each replaced.
        while done.kills_sent < kill_times.len() && kill_times[done.kills_sent] <= Instant::now() {
            let candidates: Vec<usize> = (0..a.workers)
                .filter(|i| frozen.map(|(f, _)| f) != Some(*i))
                .collect();
            if candidates.is_empty() {
                break;
            }
            let slot = candidates[rng.random_range(0..candidates.len())];
            if let Some(mut p) = fleet.procs[slot].take() {
                p.signal(Signal::SIGKILL)?;
                done.kills_sent += 1;
                let status = p.child.wait().await?;
                if status.signal() == Some(Signal::SIGKILL as i32) {
                    done.kills_confirmed += 1;
                } else {
                    bail!("worker {} did not die by SIGKILL: {status}", p.name);
                }
            }
            fleet.spawn(slot, rng.random())?;
        }
        // PostgreSQL crash-restarts while workers claim and send.
        if done.pg_restarts < restart_times.len() && restart_times[done.pg_restarts] <= now {
            faults_bar.set_message("crash-restarting PostgreSQL");
            let c = cluster.clone();
            tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                c.stop(StopMode::Immediate)?;
                c.start()?;
                Ok(())
            })
            .await??;
            done.pg_restarts += 1;
        }
        // Freezes of the worker holding the most actions, past its lease.
        if frozen.is_none()
            && done.freezes < freeze_times.len()
            && freeze_times[done.freezes] <= now
        {
            match busiest_worker(&store, &fleet).await {
                Some(slot) => {
                    if let Some(p) = &fleet.procs[slot] {
                        p.signal(Signal::SIGSTOP)?;
                        done.freezes += 1;
                        frozen = Some((
                            slot,
                            Instant::now() + Duration::from_millis(a.lease_ttl_ms * 2 + 500),
                        ));
                    }
                }
                // Nobody holds anything this instant: try again shortly.
                None => freeze_misses += 1,
            }
        }
        let s = match store.summary(1800).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "chaos: store unavailable (restart?)");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        bars.update(&s);
        faults_bar.set_message(format!(
            "kills {}/{} (confirmed {}) · PostgreSQL restarts {}/{} · freezes {}/{}{}",
            done.kills_sent,
            a.kills,
            done.kills_confirmed,
            done.pg_restarts,
            a.pg_restarts,
            done.freezes,
            a.freezes,
            if frozen.is_some() {
                " · a worker is frozen"
            } else {
                ""
            }
        ));
        let final_count = s.state("done") + s.state("failed");
        if final_count != last_final {
            last_final = final_count;
            last_progress = Instant::now();
        } else if Instant::now() > t0 + span && last_progress.elapsed() > stall {
            faults_bar.set_message(format!(
                "stalled: no action became final for {} s",
                stall.as_secs()
            ));
            break;
        }
        let faults_done = done.kills_sent >= a.kills
            && done.pg_restarts >= a.pg_restarts
            && (done.freezes >= a.freezes || Instant::now() > t0 + span * 2);
        if final_count >= total && s.total() >= total && frozen.is_none() && faults_done {
            finished = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    enqueue.await??;
    tracing::debug!(
        freeze_misses,
        "chaos: freezes retried while no worker held actions"
    );
    bars.finish();
    faults_bar.finish();
    if let Some((slot, _)) = frozen {
        if let Some(p) = &fleet.procs[slot] {
            p.signal(Signal::SIGCONT)?;
        }
    }
    let wall = started.elapsed();
    for p in fleet.procs.into_iter().flatten() {
        p.stop(Duration::from_secs(10)).await?;
    }
    server.stop(Duration::from_secs(5)).await?;
    if let Some(p) = provider {
        p.stop(Duration::from_secs(5)).await?;
    }

    let report = verify_against(&store, &log).await?;
    let s = store.summary(1800).await?;
    done.fenced_writes_refused = s.event("fenced");
    done.timeouts_seen = s.event("send_unknown");
    done.duplicate_webhooks_absorbed = s.event("duplicate_webhook");
    done.backward_reports_ignored = s.event("backward");
    done.lookups = report.stats.lookup_lines;
    done.resends = resends(&log)?;
    done.reclaims = s.event("reclaimed");
    let passed = finished && report.passed();

    println!();
    print!("{}", report.table());
    println!();
    println!("| what was done to it | count |");
    println!("|---|---|");
    println!(
        "| workers SIGKILLed (confirmed by wait status) | {} of {} |",
        done.kills_confirmed, done.kills_sent
    );
    println!("| PostgreSQL crash-restarts | {} |", done.pg_restarts);
    println!(
        "| workers frozen past their lease (SIGSTOP/SIGCONT) | {} |",
        done.freezes
    );
    println!("| fenced writes refused | {} |", done.fenced_writes_refused);
    println!(
        "| actions reclaimed after a lease ran out | {} |",
        done.reclaims
    );
    println!("| lookups | {} |", done.lookups);
    println!(
        "| resends (send lines after the first, per key) | {} |",
        done.resends
    );
    println!(
        "| unknown send outcomes seen (time-outs, 409, 5xx, resets) | {} |",
        done.timeouts_seen
    );
    println!(
        "| duplicate webhooks absorbed | {} |",
        done.duplicate_webhooks_absorbed
    );
    println!(
        "| backward (out-of-order) reports ignored | {} |",
        done.backward_reports_ignored
    );
    println!();
    println!(
        "seed {seed} · {} actions · {} stores · {} workers · wall time {:.1} s · {}",
        a.actions,
        a.stores,
        a.workers,
        wall.as_secs_f64(),
        if passed { "PASSED" } else { "FAILED" }
    );
    if !finished {
        println!(
            "not every action reached a final status within {} s",
            a.timeout_s
        );
    }
    if let Some(path) = &a.report {
        let r = ChaosReport {
            seed,
            passed,
            wall_time_s: wall.as_secs_f64(),
            actions: a.actions,
            stores: a.stores,
            workers: a.workers,
            unsafe_resend: a.unsafe_resend,
            done: &done,
            verify: report.to_json(),
        };
        std::fs::write(path, serde_json::to_vec_pretty(&r)?)
            .with_context(|| format!("writing {}", path.display()))?;
        // The same report as a page, for people (the dashboard's /report
        // opens the JSON too).
        let html = path.with_extension("html");
        std::fs::write(
            &html,
            courier_dispatch::dashboard::render_report_html(&serde_json::to_value(&r)?),
        )
        .with_context(|| format!("writing {}", html.display()))?;
        println!("report: {} and {}", path.display(), html.display());
    }
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop(StopMode::Fast)).await??;
    if a.keep || !passed {
        println!("run directory kept: {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).ok();
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Stops a cluster when dropped (an error path included).
struct StopOnDrop(Cluster);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Err(e) = self.0.stop(StopMode::Immediate) {
            eprintln!("warning: could not stop the chaos PostgreSQL: {e}");
        }
    }
}

/// The worker slot whose process holds the most actions right now.
async fn busiest_worker(store: &PgStore, fleet: &Fleet) -> Option<usize> {
    let owners = store.owners_holding().await.ok()?;
    for (owner, _) in owners {
        // Owners are host:pid:suffix.
        let pid: i32 = owner.split(':').nth(1)?.parse().ok()?;
        if let Some(slot) = fleet
            .procs
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.pid == pid))
        {
            return Some(slot);
        }
    }
    None
}

/// Send lines after the first, per key.
fn resends(log: &Path) -> anyhow::Result<u64> {
    let f = std::fs::File::open(log)?;
    let mut keys = HashSet::new();
    let mut sends = 0u64;
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["op"] == "send" {
            if let Some(k) = v["key"].as_str() {
                sends += 1;
                keys.insert(k.to_string());
            }
        }
    }
    Ok(sends - keys.len() as u64)
}

/// Enqueues through the API at a steady rate over `span`, with one store
/// `noisy_factor` times busier than each of the others.
async fn enqueue_weighted(
    api: String,
    actions: usize,
    stores: usize,
    noisy_factor: usize,
    span: Duration,
    seed: u64,
) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let stores = stores.max(1);
    let weight_total = noisy_factor + stores - 1;
    let http = reqwest::Client::new();
    let url = format!("{api}/v1/actions");
    let t0 = Instant::now();
    let mut inflight = tokio::task::JoinSet::new();
    for i in 0..actions {
        let due = t0 + span.mul_f64(i as f64 / actions.max(1) as f64);
        tokio::time::sleep_until(due.into()).await;
        let x = rng.random_range(0..weight_total);
        let s = if x < noisy_factor {
            0
        } else {
            x - noisy_factor + 1
        };
        let body = serde_json::json!({
            "store": format!("store-{s:03}"),
            "to": format!("+1555{:07}", i),
            "body": format!("Order {i} has shipped."),
            "key": format!("order-{i}"),
        });
        let http = http.clone();
        let url = url.clone();
        inflight.spawn(async move {
            // The server may be briefly unable to reach a restarting
            // database: retry (the enqueue is idempotent on its key).
            let mut last = String::new();
            for attempt in 0..50u64 {
                match http.post(&url).json(&body).send().await {
                    Ok(r) if r.status().is_success() => return Ok(()),
                    Ok(r) => last = format!("{}", r.status()),
                    Err(e) => last = e.to_string(),
                }
                tokio::time::sleep(Duration::from_millis(100 + 20 * attempt)).await;
            }
            anyhow::bail!("enqueue {i} kept failing: {last}")
        });
        while inflight.len() > 64 {
            if let Some(r) = inflight.join_next().await {
                r??;
            }
        }
    }
    while let Some(r) = inflight.join_next().await {
        r??;
    }
    Ok(())
}
