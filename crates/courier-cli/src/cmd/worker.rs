//! `courier worker`: one worker process (run as many as you like).

use super::common::{shutdown_on_signal, DbArgs, LimitArgs, ProviderArgs};
use courier_dispatch::worker::{UnsafeResend, Worker, WorkerConfig};
use courier_store::ClaimMode;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    provider: ProviderArgs,
    /// fair: least recently served store first; fifo: oldest action first.
    #[arg(long, default_value = "fair")]
    claim: ClaimMode,
    /// How long an idle worker waits before claiming again.
    #[arg(long, default_value_t = 20)]
    idle_poll_ms: u64,
    /// Do not run the reconciler in this process.
    #[arg(long)]
    no_reconcile: bool,
    /// Seed of this worker's jitter (random when not given).
    #[arg(long)]
    seed: Option<u64>,
    /// DEMONSTRATION ONLY, BROKEN ON PURPOSE: after an unknown outcome resend
    /// at once without a lookup (no-lookup) or with a new key (new-key), so the
    /// verifier's negative control has something to catch.
    #[arg(long, value_parser = parse_unsafe)]
    unsafe_resend: Option<UnsafeResend>,
    /// Serve this worker's Prometheus metrics at http://ADDR/metrics (port 0
    /// picks a free one; stderr says which).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
}

pub fn parse_unsafe(s: &str) -> Result<UnsafeResend, String> {
    match s {
        "no-lookup" => Ok(UnsafeResend::NoLookup),
        "new-key" => Ok(UnsafeResend::NewKey),
        other => Err(format!("unknown mode {other:?} (no-lookup | new-key)")),
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let limits = args.limits.limits()?;
    let client = args.provider.client(limits.request_timeout_ms)?;
    // The database may be restarting while this worker starts (a replacement
    // started during a crash-restart): keep trying for a while.
    let store = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut wait_ms = 100;
        loop {
            match args.db.connect(8).await {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::warn!(error = %format!("{e:#}"), "database not reachable yet; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
                    wait_ms = (wait_ms * 2).min(2_000);
                }
                Err(e) => return Err(e),
            }
        }
    };
    let owner = courier_dispatch::owner_name();
    let seed = args.seed.unwrap_or_else(rand_seed);
    eprintln!(
        "courier worker {owner} (seed {seed}, claim {:?})",
        args.claim
    );
    if let Some(mode) = args.unsafe_resend {
        eprintln!("WARNING: --unsafe-resend {mode:?}: this worker is broken on purpose (a demonstration for the verifier)");
    }
    let shutdown = shutdown_on_signal();
    if let Some(listen) = &args.metrics_listen {
        let addr = courier_dispatch::metrics::serve_standalone(listen, shutdown.clone()).await?;
        eprintln!("courier worker metrics on http://{addr}/metrics");
    }
    let worker = Worker::new(
        store,
        client,
        WorkerConfig {
            limits,
            claim_mode: args.claim,
            owner,
            idle_poll_ms: args.idle_poll_ms,
            reconcile: !args.no_reconcile,
            seed,
            unsafe_resend: args.unsafe_resend,
        },
    );
    worker.run(shutdown).await;
    let s = worker.stats();
    eprintln!(
        "courier worker done: claimed {} (reclaimed {}), sends {} (unknown {}), lookups {}, settled {}, failed {}, fenced {}",
        s.claimed.load(Ordering::Relaxed),
        s.reclaimed.load(Ordering::Relaxed),
        s.sends.load(Ordering::Relaxed),
        s.sends_unknown.load(Ordering::Relaxed),
        s.lookups.load(Ordering::Relaxed),
        s.settled.load(Ordering::Relaxed),
        s.failed.load(Ordering::Relaxed),
        s.fenced.load(Ordering::Relaxed),
    );
    Ok(ExitCode::SUCCESS)
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id())
}
