//! `courier worker`: one worker process (run as many as you like).

use super::common::{
    shutdown_on_signal, ChosenProvider, DbArgs, LimitArgs, ProviderArgs, RetentionArgs,
};
use courier_core::Tier;
#[cfg(feature = "negative-controls")]
use courier_dispatch::broken::{UnsafeProvider, UnsafeResend};
use courier_dispatch::pruner::PrunerConfig;
use courier_dispatch::worker::{Provider, Worker, WorkerConfig};
use courier_store::{ClaimMode, PgStore};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    provider: ProviderArgs,
    #[command(flatten)]
    retention: RetentionArgs,
    /// Do not prune in this process (the maintained counts are still folded).
    #[arg(long)]
    no_prune: bool,
    /// fair: least recently served store first; fifo: oldest action first.
    #[arg(long, default_value = "fair")]
    claim: ClaimMode,
    /// How long an idle worker waits before claiming again.
    #[arg(long, default_value_t = 20)]
    idle_poll_ms: u64,
    /// The provider's gate, shared by every worker that names it: its
    /// ceiling (`courier providers limit`) meters their claims, and a "too
    /// many requests" from the provider pauses them all. Default: the
    /// provider's name (`contract`, or the named provider's). Workers that
    /// send through different accounts of one provider name different gates.
    #[arg(long, value_name = "NAME")]
    provider_gate: Option<String>,
    /// Do not run the reconciler in this process.
    #[arg(long)]
    no_reconcile: bool,
    /// The provider's guarantee tier (courier_core::tier, docs/operations.md):
    /// a: a key and a lookup by key (the contract; exactly one effect);
    /// a-: a key, no lookup (a resend with the same key is the lookup, inside
    /// --key-retention-s; then hold); b: no dedup, a lookup by reference that
    /// lags at most --lookup-lag-ms (a "not found" is trusted only after it);
    /// c: neither, an unknown outcome is held for an operator (at most one
    /// effect); c-resend: neither, sent again (at least one effect,
    /// duplicates possible).
    /// (Default: the provider's own; a tier its provider does not allow is
    /// refused.)
    #[arg(long)]
    tier: Option<Tier>,
    /// Seed of this worker's jitter (random when not given).
    #[arg(long)]
    seed: Option<u64>,
    /// DEMONSTRATION ONLY, BROKEN ON PURPOSE: after an unknown outcome resend
    /// at once without a lookup (no-lookup) or with a new key (new-key), so the
    /// verifier's negative control has something to catch. It wraps the
    /// provider client (`courier_dispatch::broken`); the worker is unchanged.
    /// Only in a build with the `negative-controls` feature.
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    unsafe_resend: Option<UnsafeResend>,
    /// DEMONSTRATION ONLY, BROKEN ON PURPOSE: ignore every action's
    /// expires_at (send it whenever it is claimed, never expire it), so the
    /// verifier's row of sends after expires_at has something to catch.
    /// Only in a build with the `negative-controls` feature.
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    unsafe_ignore_expiry: bool,
    /// Serve this worker's Prometheus metrics at http://ADDR/metrics (port 0
    /// picks a free one; stderr says which).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// The token scrapers of --metrics-listen must send (bearer); without
    /// one, the metrics listen only on loopback.
    #[arg(long, env = "COURIER_METRICS_TOKEN")]
    metrics_token: Option<String>,
    /// Serve the metrics beyond loopback with no token.
    #[arg(long)]
    insecure_no_auth: bool,
}

/// Refuses open metrics beyond loopback, before anything starts.
async fn metrics_listen_check(args: &Args) -> anyhow::Result<()> {
    let Some(listen) = &args.metrics_listen else {
        return Ok(());
    };
    let exposed = courier_dispatch::server::beyond_loopback(listen).await?;
    if exposed && args.metrics_token.is_none() && !args.insecure_no_auth {
        anyhow::bail!(
            "refusing to serve metrics on {listen}: it reaches beyond this machine and no \
             token protects it; pass --metrics-token (scrapers send it as a bearer token), \
             or --insecure-no-auth to serve them open"
        );
    }
    Ok(())
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    metrics_listen_check(&args).await?;
    let limits = args.limits.limits()?;
    let retention = args.retention.retention(&limits)?;
    let chosen = args.provider.client(&limits)?;
    let tier = args.tier.unwrap_or(chosen.tier);
    if !tier.runs_on(chosen.tier) {
        anyhow::bail!(
            "provider {} allows tier {} at best: --tier {tier} would promise more than it can \
             (docs/operations.md, guarantee tiers)",
            chosen.name,
            chosen.tier
        );
    }
    let ChosenProvider {
        client,
        name: provider_name,
        ..
    } = chosen;
    let gate = args
        .provider_gate
        .clone()
        .unwrap_or_else(|| provider_name.clone());
    courier_core::rate::validate_name("--provider-gate", &gate).map_err(anyhow::Error::msg)?;
    let store = connect(&args).await?;
    let owner = courier_dispatch::owner_name();
    let seed = args.seed.unwrap_or_else(rand_seed);
    eprintln!(
        "courier worker {owner} (seed {seed}, claim {:?}, provider {} at tier {tier}: {})",
        args.claim,
        provider_name,
        tier.promise()
    );
    let shutdown = shutdown_on_signal();
    if let Some(listen) = &args.metrics_listen {
        let addr = courier_dispatch::metrics::serve_standalone(
            listen,
            args.metrics_token.clone(),
            shutdown.clone(),
        )
        .await?;
        eprintln!("courier worker metrics on http://{addr}/metrics");
    }
    let pruner = if args.no_prune {
        PrunerConfig::fold_only(&retention)
    } else {
        PrunerConfig::new(&retention, &limits)
    };
    let cfg = WorkerConfig {
        limits,
        claim_mode: args.claim,
        owner,
        idle_poll_ms: args.idle_poll_ms,
        reconcile: !args.no_reconcile,
        pruner: Some(pruner),
        seed,
        tier,
        provider_gate: Some(gate),
    };
    #[cfg(feature = "negative-controls")]
    if let Some(mode) = args.unsafe_resend {
        eprintln!("WARNING: --unsafe-resend {mode:?}: this worker is broken on purpose (a demonstration for the verifier)");
        let broken = UnsafeProvider::new(client, mode, seed);
        let worker = ignoring_expiry(&args, Worker::new(store, broken, cfg));
        run_worker(worker, shutdown).await;
        return Ok(ExitCode::SUCCESS);
    }
    let worker = ignoring_expiry(&args, Worker::new(store, client, cfg));
    run_worker(worker, shutdown).await;
    Ok(ExitCode::SUCCESS)
}

/// The worker, made to ignore the expiry when `--unsafe-ignore-expiry` says
/// so (a `negative-controls` build only; otherwise the worker as it is).
#[cfg_attr(not(feature = "negative-controls"), allow(unused_variables))]
fn ignoring_expiry<P: Provider>(args: &Args, worker: Worker<P>) -> Worker<P> {
    #[cfg(feature = "negative-controls")]
    if args.unsafe_ignore_expiry {
        eprintln!("WARNING: --unsafe-ignore-expiry: this worker sends actions past their expires_at on purpose (a demonstration for the verifier)");
        return worker.with_unsafe_ignore_expiry();
    }
    worker
}

/// The database may be restarting while this worker starts (a replacement
/// started during a crash-restart): keep trying for a while. A schema this
/// binary cannot work with is refused at once.
async fn connect(args: &Args) -> anyhow::Result<PgStore> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut wait_ms = 100;
    loop {
        let connected = match args.db.connect_unchecked(8).await {
            Ok(s) => s
                .schema_check()
                .await
                .map(|()| s)
                .map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        match connected {
            Ok(s) => return Ok(s),
            Err(e) if is_schema_refusal(&e) => return Err(e),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::warn!(error = %format!("{e:#}"), "database not reachable yet; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
                wait_ms = (wait_ms * 2).min(2_000);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A refusal of the schema (not retryable), as opposed to an outage.
fn is_schema_refusal(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<courier_store::StoreError>(),
        Some(courier_store::StoreError::Query(_))
    )
}

async fn run_worker<P: Provider>(worker: Worker<P>, shutdown: CancellationToken) {
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
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use courier_core::Limits;
    use courier_rig::spec::{ProviderTarget, WorkerSpec};

    fn parse(args: Vec<String>) -> Args {
        let argv = std::iter::once("courier".to_string()).chain(args);
        match crate::Cli::try_parse_from(argv).expect("the rig's flags parse") {
            crate::Cli {
                command: crate::Command::Worker(a),
            } => a,
            _ => panic!("not the worker command"),
        }
    }

    /// The rig writes a worker's flags from its typed spec; this parses them
    /// back with the worker's own parser, so a flag renamed on either side
    /// fails here rather than in a run.
    #[test]
    fn the_rigs_worker_spec_round_trips_through_the_worker_flags() {
        // Every limit flag away from its default, and valid together.
        let limits = Limits {
            lease_ttl_ms: 3_000,
            heartbeat_interval_ms: 500,
            send_margin_ms: 600,
            request_timeout_ms: 900,
            store_in_flight_max: 3,
            claim_batch_max: 5,
            worker_concurrency_max: 7,
            final_overdue_ms: 4_000,
            key_retention_s: 7_200,
            intent_age_alert_percent: 40,
            lookup_lag_ms: 1_500,
            ..Limits::default()
        };
        let mut spec = WorkerSpec {
            database_url: "postgres://postgres@127.0.0.1:5/db".into(),
            provider: ProviderTarget {
                url: "http://127.0.0.1:6".into(),
                api_key: "key".into(),
                callback_url: Some("http://127.0.0.1:7/v1/webhooks/provider".into()),
            },
            named: None,
            limits,
            retention: courier_rig::spec::chaos_retention(),
            tier: courier_core::Tier::B,
            unsafe_resend: None,
            unsafe_ignore_expiry: false,
            unshared_gate: false,
        };
        #[cfg(feature = "negative-controls")]
        {
            spec.unsafe_resend = Some(UnsafeResend::NoLookup);
            spec.unsafe_ignore_expiry = true;
        }
        let a = parse(spec.args(99));
        assert_eq!(a.limits.limits().unwrap(), spec.limits);
        assert_eq!(a.retention.retention(&spec.limits).unwrap(), spec.retention);
        assert_eq!(
            a.db.database_url.as_deref(),
            Some(spec.database_url.as_str())
        );
        assert_eq!(
            a.provider.provider_url.as_deref(),
            Some(spec.provider.url.as_str())
        );
        assert_eq!(
            a.provider.provider_api_key.as_deref(),
            Some(spec.provider.api_key.as_str())
        );
        assert_eq!(a.provider.provider_name, "contract");
        assert_eq!(a.provider.callback_url, spec.provider.callback_url);
        assert_eq!(a.seed, Some(99));
        assert_eq!(a.tier, Some(spec.tier));
        #[cfg(feature = "negative-controls")]
        {
            assert_eq!(a.unsafe_resend, spec.unsafe_resend);
            assert!(a.unsafe_ignore_expiry);
            spec.unsafe_resend = None;
            spec.unsafe_ignore_expiry = false;
            let a = parse(spec.args(1));
            assert_eq!((a.unsafe_resend, a.unsafe_ignore_expiry), (None, false));
        }
        // The flags left out keep the worker's defaults.
        spec.provider.callback_url = None;
        let a = parse(spec.args(1));
        assert_eq!(a.provider.callback_url, None);
        assert_eq!((a.idle_poll_ms, a.no_reconcile), (20, false));
        // A named provider: its name and credentials file, no API key.
        spec.named = Some(courier_rig::spec::NamedProvider {
            name: "twilio".into(),
            credentials_file: "/run/twilio.credentials".into(),
        });
        let a = parse(spec.args(1));
        assert_eq!(a.provider.provider_name, "twilio");
        assert_eq!(
            a.provider.credentials_file.as_deref(),
            Some(std::path::Path::new("/run/twilio.credentials"))
        );
        assert_eq!(a.provider.provider_api_key, None);
    }

    /// The README's build has no broken mode: the flag is not there.
    #[cfg(not(feature = "negative-controls"))]
    #[test]
    fn without_the_negative_controls_there_is_no_unsafe_resend() {
        let argv = ["courier", "worker", "--unsafe-resend", "no-lookup"];
        assert!(crate::Cli::try_parse_from(argv).is_err());
        let argv = ["courier", "worker", "--unsafe-ignore-expiry"];
        assert!(crate::Cli::try_parse_from(argv).is_err());
    }
}
