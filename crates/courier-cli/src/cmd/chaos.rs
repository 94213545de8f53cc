//! `courier chaos`: a fault run of real processes, judged by the provider's
//! log. Flags and output only; the run is `courier_rig::chaos` (the system
//! it starts, the fault plan, the kills confirmed from the wait status, the
//! verdict by the same code as `courier verify`).

use anyhow::Context;
use courier_core::Tier;
#[cfg(feature = "negative-controls")]
use courier_dispatch::broken::UnsafeResend;
use courier_providers::Named;
use courier_rig::chaos::{Chaos, ChaosConfig, ExternalProvider, FailoverSpec};
use courier_rig::database::DatabaseSpec;
use courier_rig::load::IntentMix;
use courier_rig::plan::FaultCounts;
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// PostgreSQL crash-restarts (`pg_ctl stop -m immediate`, then start);
    /// none with --failover.
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
    /// Give the first --rated-stores stores (store-000, ...) this rate,
    /// sends a second, before the load begins; the report shows their
    /// pacing from the provider's log.
    #[arg(long, value_name = "N")]
    store_rate: Option<f64>,
    /// The rated stores' burst (default: one second's worth).
    #[arg(long, value_name = "B", requires = "store_rate")]
    store_burst: Option<u32>,
    /// How many stores get --store-rate.
    #[arg(long, default_value_t = 1)]
    rated_stores: usize,
    /// The fake provider's own rate limit, sends a second (it answers 429
    /// with Retry-After over it).
    #[arg(long, value_name = "N")]
    provider_rate_limit: Option<u32>,
    /// Run the fake provider without faults: with --kills 0 --pg-restarts 0
    /// --freezes 0 too, the pacing and the shared pauses are judged, not
    /// only reported.
    #[arg(long)]
    provider_faults_off: bool,
    /// DEMONSTRATION ONLY: each worker names a provider gate of its own,
    /// so a 429 pauses only the worker that got it (the shared pause's
    /// negative control).
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    unsafe_unshared_gates: bool,
    /// Share of the actions enqueued with a not_before 1 to 4 s ahead.
    #[arg(long, default_value_t = IntentMix::chaos().scheduled_share)]
    scheduled_share: f64,
    /// Share of the actions enqueued with an expires_at ahead (see
    /// --expires-min-ms, --expires-max-ms); an action is scheduled or
    /// expiring, not both.
    #[arg(long, default_value_t = IntentMix::chaos().expiring_share)]
    expiring_share: f64,
    /// Share of the actions cancelled up to 100 ms after their enqueue is
    /// acknowledged (a 409 because a worker claimed it first is expected).
    #[arg(long, default_value_t = IntentMix::chaos().cancel_share)]
    cancel_share: f64,
    /// The soonest an expiring action's expires_at is, after its enqueue.
    #[arg(long, default_value_t = IntentMix::chaos().expires_min_ms)]
    expires_min_ms: u64,
    /// The latest an expiring action's expires_at is, after its enqueue.
    #[arg(long, default_value_t = IntentMix::chaos().expires_max_ms)]
    expires_max_ms: u64,
    /// Write everything (table, counts, seed, timings) as JSON.
    #[arg(long)]
    report: Option<PathBuf>,
    /// DEMONSTRATION ONLY: run broken workers (no-lookup | new-key) to show
    /// that the verifier catches blind resends and duplicate messages. Only
    /// in a build with the `negative-controls` feature.
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    unsafe_resend: Option<UnsafeResend>,
    /// DEMONSTRATION ONLY: run workers that ignore every action's
    /// expires_at, to show that the verifier catches sends after the
    /// deadline. Only in a build with the `negative-controls` feature.
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    unsafe_ignore_expiry: bool,
    /// The provider's guarantee tier: the fake provider leaves out what the
    /// tier lacks (a-: the lookup; b: the deduplication, and its lookups lag
    /// 3 s, longer than a request's time-out; c: both), the workers run with `--tier`, and the verdict
    /// holds the run to the tier's promise (a, b: exactly once; a-: exactly
    /// once by resend; c: at most once; c-resend: at least once).
    /// (Default: a, or the named provider's own tier.)
    #[arg(long, conflicts_with = "provider_url")]
    tier: Option<Tier>,
    /// A named provider (twilio, telnyx, infobip): the fake runs as its
    /// double (its wire format, errors and signed callbacks), the workers
    /// send through its adapter, the server checks its webhooks, and the
    /// verdict holds the run to the provider's tier.
    #[arg(long = "provider", conflicts_with = "provider_url")]
    named: Option<Named>,
    /// DEMONSTRATION ONLY: the workers decide by this tier while the provider
    /// and the verdict stay at --tier (`--tier c --unsafe-worker-tier
    /// c-resend`: a tier-c worker that resends under hold; `--tier b
    /// --unsafe-worker-tier a`: one that trusts a "not found" at once), so
    /// the verifier must fail. Only in a build with the `negative-controls`
    /// feature.
    #[cfg(feature = "negative-controls")]
    #[arg(long)]
    unsafe_worker_tier: Option<Tier>,
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
    /// Run on a local HA cluster (3 etcd members, Patroni, a primary and two
    /// synchronous standbys) and fail it over: node deaths, pauses past the
    /// TTL, switchovers, postmaster kills (a restart, not a failover).
    #[arg(long)]
    failover: bool,
    #[arg(long, default_value_t = 1, requires = "failover")]
    node_deaths: usize,
    #[arg(long, default_value_t = 1, requires = "failover")]
    pauses: usize,
    #[arg(long, default_value_t = 1, requires = "failover")]
    switchovers: usize,
    #[arg(long, default_value_t = 1, requires = "failover")]
    postmaster_kills: usize,
    /// DEMONSTRATION ONLY: the failover run's negative control: asynchronous
    /// replication and one failover that loses the tail of the WAL (the
    /// primary's WAL senders stopped, then the primary killed). The
    /// checker must fail.
    #[arg(long, conflicts_with = "failover")]
    failover_control: bool,
    /// Keep the run directory (cluster, logs) instead of deleting it.
    /// (It is always kept when the run fails.)
    #[arg(long)]
    keep: bool,
}

impl Args {
    /// The tier given, or the named provider's own, or a.
    fn tier(&self) -> Tier {
        self.tier
            .unwrap_or_else(|| self.named.map_or(Tier::A, Named::double_tier))
    }

    fn config(&self, seed: u64) -> anyhow::Result<ChaosConfig> {
        let provider = match &self.provider_url {
            None => None,
            Some(url) => Some(ExternalProvider {
                url: url.clone(),
                log: self
                    .provider_log
                    .clone()
                    .context("--provider-log is required")?,
                api_key: (self.provider_api_key.clone())
                    .context("--provider-api-key is required")?,
                webhook_secret: (self.webhook_secret.clone())
                    .context("--webhook-secret is required")?,
            }),
        };
        let failover = if self.failover_control {
            Some(FailoverSpec::control())
        } else if self.failover {
            let mut f = FailoverSpec::proof();
            f.counts.node_deaths = self.node_deaths;
            f.counts.pauses = self.pauses;
            f.counts.switchovers = self.switchovers;
            f.counts.postmaster_kills = self.postmaster_kills;
            Some(f)
        } else {
            None
        };
        let store_rate = courier_core::rate::validate_rate(self.store_rate, self.store_burst)
            .map_err(|e| anyhow::anyhow!("--store-rate / --store-burst: {e}"))?;
        let flow = courier_rig::flow::FlowSpec {
            store_rate,
            rated_stores: if store_rate.is_some() {
                self.rated_stores
            } else {
                0
            },
            fake_rate_limit: self.provider_rate_limit,
            #[cfg(feature = "negative-controls")]
            unshared_gates: self.unsafe_unshared_gates,
            #[cfg(not(feature = "negative-controls"))]
            unshared_gates: false,
        };
        Ok(ChaosConfig {
            seed,
            actions: self.actions,
            stores: self.stores,
            workers: self.workers,
            faults: FaultCounts {
                kills: self.kills,
                pg_restarts: if failover.is_some() {
                    0
                } else {
                    self.pg_restarts
                },
                freezes: self.freezes,
            },
            noisy_factor: self.noisy_factor,
            concurrency: self.concurrency,
            lease_ttl_ms: self.lease_ttl_ms,
            duration_s: self.duration_s,
            #[cfg(feature = "negative-controls")]
            unsafe_resend: self.unsafe_resend,
            #[cfg(not(feature = "negative-controls"))]
            unsafe_resend: None,
            #[cfg(feature = "negative-controls")]
            unsafe_ignore_expiry: self.unsafe_ignore_expiry,
            #[cfg(not(feature = "negative-controls"))]
            unsafe_ignore_expiry: false,
            tier: self.tier(),
            named: self.named,
            #[cfg(feature = "negative-controls")]
            unsafe_worker_tier: self.unsafe_worker_tier,
            #[cfg(not(feature = "negative-controls"))]
            unsafe_worker_tier: None,
            intent: IntentMix {
                scheduled_share: self.scheduled_share,
                expiring_share: self.expiring_share,
                cancel_share: self.cancel_share,
                expires_min_ms: self.expires_min_ms,
                expires_max_ms: self.expires_max_ms,
            },
            provider,
            database: DatabaseSpec::Throwaway,
            timeout_s: self.timeout_s,
            stall_s: self.stall_s,
            failover,
            flow,
            provider_faults_off: self.provider_faults_off,
        })
    }
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or_else(rand::random);
    println!("courier chaos: seed {seed} (replay with --seed {seed})");
    if a.failover_control {
        println!("WARNING: --failover-control: asynchronous replication and a failover that loses acknowledged writes; the checker must fail");
    }
    #[cfg(feature = "negative-controls")]
    if let Some(mode) = a.unsafe_resend {
        println!("WARNING: --unsafe-resend {mode:?}: the workers are broken on purpose; the verifier must fail");
    }
    #[cfg(feature = "negative-controls")]
    if let Some(t) = a.unsafe_worker_tier {
        println!("WARNING: --unsafe-worker-tier {t}: the workers decide as tier {t}, not {}, on purpose; the verifier must fail", a.tier());
    }
    #[cfg(feature = "negative-controls")]
    if a.unsafe_unshared_gates {
        println!("WARNING: --unsafe-unshared-gates: a 429 pauses only the worker that got it, on purpose; the pause check must fail");
    }
    #[cfg(feature = "negative-controls")]
    if a.unsafe_ignore_expiry {
        println!("WARNING: --unsafe-ignore-expiry: the workers send past expires_at on purpose; the verifier must fail");
    }
    let exe = std::env::current_exe().context("locating the courier binary")?;
    let chaos = Chaos::start(&exe, a.config(seed)?).await?;
    println!(
        "run dir {} · server {} · provider {} {} (tier {}: {}) · {} workers · lease {} ms",
        chaos.dir().display(),
        chaos.api(),
        a.named.map_or("contract", Named::as_str),
        chaos.provider_url(),
        a.tier(),
        a.tier().promise(),
        a.workers,
        a.lease_ttl_ms
    );
    let outcome = chaos.run().await?;
    println!();
    print!("{}", outcome.report.table());
    if let Some(t) = outcome.failover_table() {
        println!();
        print!("{t}");
    }
    if let Some(t) = outcome.flow_table() {
        println!();
        print!("{t}");
    }
    println!();
    print!("{}", outcome.done_table());
    println!();
    println!(
        "seed {seed} · {} actions · {} stores · {} workers · wall time {:.1} s · {}",
        a.actions,
        a.stores,
        a.workers,
        outcome.wall.as_secs_f64(),
        if outcome.passed { "PASSED" } else { "FAILED" }
    );
    if !outcome.finished {
        println!(
            "not every action reached a final status within {} s",
            a.timeout_s
        );
    }
    if let Some(path) = &a.report {
        std::fs::write(path, outcome.to_json_pretty())
            .with_context(|| format!("writing {}", path.display()))?;
        // The same report as a page, for people (the dashboard's /report
        // opens the JSON too).
        let html = path.with_extension("html");
        let page = courier_dispatch::dashboard::render_report_html(&outcome.to_json());
        std::fs::write(&html, page).with_context(|| format!("writing {}", html.display()))?;
        println!("report: {} and {}", path.display(), html.display());
    }
    let passed = outcome.passed;
    if let Some(dir) = outcome.close(a.keep).await? {
        println!("run directory kept: {}", dir.display());
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
