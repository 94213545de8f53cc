//! `courier bench fairness | scale | throughput | enqueue | history | soak | live-migration | provider`: flags in, figures out. The work is
//! in the `courier-bench` crate; this module only parses flags and prints.
//!
//! Every flag left out takes the benchmark's default, or with `--smoke` the
//! smoke default (seconds, a tiny load: it checks that everything runs and
//! judges no timing).

use courier_bench::fairness::{self, FairnessConfig};
use courier_bench::harness::probe::Probes;
use courier_bench::matrix::{self, Cell, MatrixConfig};
use courier_bench::scale::{self, ScaleConfig};
use courier_bench::throughput::{self, ThroughputConfig};
use courier_fake::Latency;
use courier_store::ClaimMode;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(clap::Subcommand)]
enum Which {
    /// Will one noisy store hurt the others? Quiet stores' latency with fair
    /// and with FIFO claiming, in three scenarios, and two flow-control
    /// scenarios (a rate-limited store, a provider's 429), in one run.
    Fairness(Box<FairnessArgs>),
    /// Does a claim cost the same with a million stores? Claim round trip
    /// and drain rate against stores registered (100 active), and with
    /// 10,000 active stores.
    Scale(ScaleArgs),
    /// How fast is it? End to end, claim to settle alone, and this
    /// PostgreSQL's own ceiling (pgbench), with synchronous commit on and off.
    Throughput(ThroughputArgs),
    /// Does cost grow with history? The hot paths, `courier status` and the
    /// dashboard's sample on an empty database and on 10,000,000 finished actions.
    History(super::bench_life::HistoryArgs),
    /// A long run at ~65% of capacity with pruning on: sizes, claim p99 and
    /// worker memory, the last third against the first.
    Soak(super::bench_life::SoakArgs),
    /// The newest migrations (the no-transaction 14 and 16) applied while
    /// workers run on a large database.
    LiveMigration(super::bench_life::LiveMigrationArgs),
    /// How fast do actions get in? Actions a second through HTTP and the
    /// library, one at a time and in batches (synchronous commit on).
    Enqueue(EnqueueArgs),
    /// Is the fake provider ever the bottleneck? Sends/s and latency over
    /// real loopback HTTP (faults off, latency 0, unique keys, keep-alive).
    Provider(ProviderArgs),
}

#[derive(clap::Args)]
struct ScaleArgs {
    /// Stores registered in each row, comma-separated (default
    /// 100,10000,100000,1000000; 10,2000 with --smoke).
    #[arg(long, value_delimiter = ',')]
    registered: Option<Vec<u32>>,
    /// Stores with work in those rows (default 100; 10 with --smoke).
    #[arg(long)]
    active: Option<u32>,
    /// Active stores of the last row, each with a backlog; 0 leaves it out
    /// (default 10000; 200 with --smoke).
    #[arg(long)]
    many_active: Option<u32>,
    /// Actions scheduled for tomorrow in one more row of the first row's
    /// shape; 0 leaves it out (default 1000000; 2000 with --smoke).
    #[arg(long)]
    scheduled: Option<u32>,
    /// Each row's backlog; it must outlast the row's slices (default
    /// 200000; 4000 with --smoke).
    #[arg(long)]
    actions: Option<u32>,
    /// Concurrent claimers (default 2).
    #[arg(long)]
    claimers: Option<u32>,
    /// Actions claimed in one round trip (default 16).
    #[arg(long)]
    claim_batch_max: Option<u32>,
    /// Actions of one store held at once (default 4).
    #[arg(long)]
    store_in_flight_max: Option<u32>,
    /// Seed (random when not given; printed first). The run has no random
    /// schedule; the seed names the run.
    #[arg(long)]
    seed: Option<u64>,
    /// Slices each row is drained for, the rows taking turns (default 20;
    /// 2 with --smoke).
    #[arg(long)]
    slices: Option<u32>,
    /// One slice's length (default 1000; 200 with --smoke).
    #[arg(long)]
    slice_ms: Option<u64>,
    /// Where to write the SVG chart.
    #[arg(long, default_value = ".courier/bench/scale.svg")]
    chart: PathBuf,
    /// Print the report as JSON on stdout (the rest goes to stderr).
    #[arg(long)]
    json: bool,
    /// Seconds, a tiny load: checks that everything runs, judges nothing.
    #[arg(long)]
    smoke: bool,
}

#[derive(clap::Args)]
struct FairnessArgs {
    /// Stores (default 100; 10 with --smoke).
    #[arg(long)]
    stores: Option<u32>,
    /// How many stores are noisy in the noisy scenarios (default 1).
    #[arg(long)]
    noisy_stores: Option<u32>,
    /// How many times the others' rate a noisy store sends (default 10).
    #[arg(long)]
    noise_factor: Option<u32>,
    /// Arrivals per second of each ordinary store (default 2.5; 5 with --smoke).
    #[arg(long)]
    rate_per_store: Option<f64>,
    /// Length of each scenario's load in each round (default 40; 3 with --smoke).
    #[arg(long)]
    duration_s: Option<u64>,
    /// Runs of every scenario and claim mode, in alternating order; figures
    /// are medians over the rounds (default 3; 1 with --smoke).
    #[arg(long)]
    rounds: Option<u32>,
    /// Actions enqueued in the first seconds are not measured (default 2; 0 with --smoke).
    #[arg(long)]
    warmup_s: Option<u64>,
    /// Seed of the arrival schedules (random when not given; printed first).
    #[arg(long)]
    seed: Option<u64>,
    /// In-process workers (default: sized for the target utilisation).
    #[arg(long)]
    workers: Option<u32>,
    /// Actions each worker works on at once (default: sized for the target utilisation).
    #[arg(long)]
    concurrency: Option<u32>,
    /// Actions of one store held by workers at once (default 1).
    #[arg(long)]
    store_in_flight_max: Option<u32>,
    /// Size the per-store cap for the noisy stores' rate at the utilisation
    /// target (at least --store-in-flight-max), as --matrix does in every
    /// cell.
    #[arg(long)]
    size_store_cap: bool,
    /// Actions claimed in one round trip (default 16).
    #[arg(long)]
    claim_batch_max: Option<u32>,
    /// How long an idle worker waits before claiming again (default 10).
    #[arg(long)]
    idle_poll_ms: Option<u64>,
    /// The share of worker capacity the baseline keeps busy (default 0.6).
    #[arg(long)]
    utilisation_target: Option<f64>,
    /// Length of the calibration run that measures how long an action holds
    /// a worker slot, to size the capacity; 0 skips it (default 10; 2 with --smoke).
    #[arg(long)]
    calibration_s: Option<u64>,
    /// The provider's latency: MS, uniform:MIN..MAX or lognormal:median=MS,sigma=S
    /// (default lognormal:median=25,sigma=0.5).
    #[arg(long)]
    latency: Option<Latency>,
    /// A bulk store's bursts are at least this large (default 1000; 50 with --smoke).
    #[arg(long)]
    burst_actions_min: Option<u32>,
    /// Samplers to run beside the load when investigating, comma-separated:
    /// cpu (the CPU by role and the kernel's stall shares), lateness (how
    /// late the bench's runtime wakes), scans (sequential scans of actions).
    /// The report then carries their readings (--matrix always reads cpu
    /// and scans).
    #[arg(long, value_enum, value_delimiter = ',')]
    probe: Vec<ProbeName>,
    /// Where to write the SVG chart (with --matrix, the matrix's chart).
    #[arg(long, default_value = ".courier/bench/fairness.svg")]
    chart: PathBuf,
    /// Print the report as JSON on stdout (the rest goes to stderr).
    #[arg(long)]
    json: bool,
    /// Seconds, a tiny load: checks that everything runs, judges no timing.
    #[arg(long)]
    smoke: bool,
    /// Run the matrix instead of one shape: stores 100, 1000, 10000 x noisy
    /// stores 1, 2, 10 x noise 10x, 20x, one row per cell (3 rounds of 8 s
    /// per run, the first second not measured, a 5 s calibration unless the
    /// flags above say otherwise; no FIFO run of the steady scenario).
    #[arg(long)]
    matrix: bool,
    /// With --matrix: only these cells, comma-separated STORESxNOISYxFACTOR
    /// (as 100x1x10,1000x2x20).
    #[arg(long, value_delimiter = ',')]
    cells: Option<Vec<Cell>>,
    /// With --matrix: the baseline's total offered load in every cell (default 250).
    #[arg(long)]
    total_rate: Option<f64>,
    /// With --matrix: cells whose noisy scenarios offer more than this per
    /// second are reported as overloaded without running (default 1000).
    #[arg(long)]
    offered_max: Option<f64>,
    /// Scenarios to run, comma-separated: classic (every store equal, one
    /// store noisy steadily and in bursts, fair and FIFO), rate-limited-store
    /// (one store at --store-rate under a burst of --store-burst-actions),
    /// provider-429 (the fake's --fake-rate-limit below --offered-rate)
    /// (default: all three; not with --matrix).
    #[arg(long, value_enum, value_delimiter = ',')]
    scenarios: Vec<ScenarioName>,
    /// rate-limited-store: the store's rate, sends a second (default 5).
    #[arg(long)]
    store_rate: Option<f64>,
    /// rate-limited-store: the store's burst, its bucket's size (default 5).
    #[arg(long)]
    store_burst: Option<u32>,
    /// rate-limited-store: actions enqueued for it at once (default 1000;
    /// 100 with --smoke).
    #[arg(long)]
    store_burst_actions: Option<u32>,
    /// rate-limited-store: the pacing window's length (default 10; 2 with --smoke).
    #[arg(long)]
    window_s: Option<u64>,
    /// rate-limited-store: windows the load lasts, the first not judged
    /// (default 6; 3 with --smoke).
    #[arg(long)]
    windows: Option<u32>,
    /// rate-limited-store: rounds of its pair of runs, baseline and limited
    /// (default 1).
    #[arg(long)]
    flow_rounds: Option<u32>,
    /// provider-429: the fake's own rate limit, N/s (default 50/s).
    #[arg(long)]
    fake_rate_limit: Option<courier_fake::SendRate>,
    /// provider-429: the fake's burst (default: one second's worth).
    #[arg(long)]
    fake_rate_burst: Option<u32>,
    /// provider-429: courier's ceiling for the provider, sends a second
    /// (default 200).
    #[arg(long)]
    provider_ceiling: Option<f64>,
    /// provider-429: arrivals a second over every store (default 100).
    #[arg(long)]
    offered_rate: Option<f64>,
    /// provider-429: the load's length (default 30; 3 with --smoke).
    #[arg(long)]
    throttled_load_s: Option<u64>,
}

/// A scenario of `--scenarios`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ScenarioName {
    Classic,
    RateLimitedStore,
    #[value(name = "provider-429")]
    Provider429,
}

/// The scenarios `names` asks for; all of them when it names none.
fn scenarios_of(names: &[ScenarioName]) -> fairness::Scenarios {
    if names.is_empty() {
        return fairness::Scenarios::ALL;
    }
    fairness::Scenarios {
        classic: names.contains(&ScenarioName::Classic),
        rate_limited_store: names.contains(&ScenarioName::RateLimitedStore),
        provider_429: names.contains(&ScenarioName::Provider429),
    }
}

/// A probe of `--probe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProbeName {
    Cpu,
    Lateness,
    Scans,
}

/// Switches on the probes `names` asks for in `probes`.
fn probes_on(probes: &mut Probes, names: &[ProbeName]) {
    for n in names {
        match n {
            ProbeName::Cpu => probes.cpu = true,
            ProbeName::Lateness => probes.lateness = true,
            ProbeName::Scans => probes.scans = true,
        }
    }
}

#[derive(clap::Args)]
struct EnqueueArgs {
    /// Seconds each path runs (default 10; 0.5 with --smoke).
    #[arg(long)]
    seconds: Option<f64>,
    /// Clients of the single paths (default 8; 2 with --smoke).
    #[arg(long)]
    clients: Option<u32>,
    /// Clients of the batch paths (default 2; 1 with --smoke).
    #[arg(long)]
    batch_clients: Option<u32>,
    /// Actions a batch (default 1000; 50 with --smoke).
    #[arg(long)]
    batch: Option<u32>,
    /// Stores the actions are spread over (default 100; 5 with --smoke).
    #[arg(long)]
    stores: Option<u32>,
    /// Enqueue without client keys (default: every action has one).
    #[arg(long)]
    no_keys: bool,
    /// An open HTTP API (default: callers send a store token).
    #[arg(long)]
    no_tokens: bool,
    /// Paths to run, comma-separated (default all: http-single,
    /// library-single, library-batch, http-batch, http-single-storm).
    #[arg(long, value_delimiter = ',')]
    paths: Option<Vec<String>>,
    /// Seed of the stores and recipients drawn (random when not given).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as JSON on stdout (the rest goes to stderr).
    #[arg(long)]
    json: bool,
    /// Seconds, a tiny load: checks that everything runs, judges no rate.
    #[arg(long)]
    smoke: bool,
}

#[derive(clap::Args)]
struct ThroughputArgs {
    /// The backlog of each path (default 100000; 300 with --smoke).
    #[arg(long)]
    actions: Option<u32>,
    /// Stores the backlog is spread over (default 100; 10 with --smoke).
    #[arg(long)]
    stores: Option<u32>,
    /// In-process workers (default 1; 2 with --smoke).
    #[arg(long)]
    workers: Option<u32>,
    /// Actions each worker works on at once (default 512; 8 with --smoke).
    #[arg(long)]
    concurrency: Option<u32>,
    /// Actions claimed in one round trip (default 256; 4 with --smoke).
    #[arg(long)]
    claim_batch_max: Option<u32>,
    /// Actions of one store held by workers at once (default 16; 4, the courier's default, with --smoke).
    #[arg(long)]
    store_in_flight_max: Option<u32>,
    /// Connections of each worker's pool (default 4).
    #[arg(long)]
    pool_size: Option<usize>,
    /// fair or fifo (default fair).
    #[arg(long)]
    claim: Option<ClaimMode>,
    /// pgbench clients (default 8; 2 with --smoke).
    #[arg(long)]
    pgbench_clients: Option<u32>,
    /// pgbench run length (default 10; 1 with --smoke).
    #[arg(long)]
    pgbench_seconds: Option<u64>,
    /// Measure with synchronous commit on, off, or both.
    #[arg(long, default_value = "both", value_parser = ["on", "off", "both"])]
    synchronous_commit: String,
    /// Seed of the workers' jitter (random when not given; printed first).
    #[arg(long)]
    seed: Option<u64>,
    /// How long one path may take (default 600).
    #[arg(long)]
    timeout_s: Option<u64>,
    /// Print the report as JSON on stdout (the rest goes to stderr).
    #[arg(long)]
    json: bool,
    /// Seconds, a tiny load: checks that everything runs, judges no timing.
    #[arg(long)]
    smoke: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.which {
        Which::Fairness(a) => run_fairness(*a).await,
        Which::Scale(a) => run_scale(a).await,
        Which::Throughput(a) => run_throughput(a).await,
        Which::Enqueue(a) => run_enqueue(a).await,
        Which::History(a) => super::bench_life::run_history(a).await,
        Which::Soak(a) => super::bench_life::run_soak(a).await,
        Which::LiveMigration(a) => super::bench_life::run_live_migration(a).await,
        Which::Provider(a) => run_provider(a).await,
    }
}

/// Prints a human line: on stdout, or on stderr when stdout carries JSON.
fn say(json: bool, text: &str) {
    if json {
        eprintln!("{text}");
    } else {
        println!("{text}");
    }
}

async fn run_fairness(a: FairnessArgs) -> anyhow::Result<ExitCode> {
    if a.matrix {
        if !a.scenarios.is_empty() {
            anyhow::bail!(
                "--scenarios does not apply to --matrix (its cells run the classic scenarios)"
            );
        }
        return run_matrix(a).await;
    }
    let seed = a.seed.unwrap_or_else(rand::random);
    say(
        a.json,
        &format!("courier bench fairness: seed {seed} (replay the schedule with --seed {seed})"),
    );
    let cfg = fairness_config(&a, seed)?;
    say_fairness_setup(&a, &cfg);
    let mut report = fairness::run(&cfg).await?;
    if cfg.scenarios.classic {
        courier_bench::chart::write_fairness(&mut report, &a.chart)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!();
        print!("{}", report.table());
    }
    if let Some(base) = report.run(courier_bench::schedule::Scenario::Baseline, ClaimMode::Fair) {
        say(
            a.json,
            &format!(
                "measured utilisation of the fair baseline: {:.0}% (mean claim-to-settle {:.1} ms)",
                base.utilisation_measured * 100.0,
                base.hold_mean_ms
            ),
        );
    }
    let chart = match &report.chart {
        Some(path) => format!("chart: {} · ", path.display()),
        None => String::new(),
    };
    say(
        a.json,
        &format!("{chart}wall time {:.0} s", report.wall_time_s),
    );
    Ok(ExitCode::SUCCESS)
}

/// One shape's configuration: the defaults (or the smoke's), the flags
/// given, checked.
fn fairness_config(a: &FairnessArgs, seed: u64) -> anyhow::Result<FairnessConfig> {
    let mut cfg = if a.smoke {
        FairnessConfig::smoke(seed)
    } else {
        FairnessConfig::new(seed)
    };
    macro_rules! set {
        ($($flag:ident => $field:ident),* $(,)?) => { $(if let Some(v) = a.$flag { cfg.$field = v; })* };
    }
    set!(
        stores => stores,
        noisy_stores => noisy_stores,
        noise_factor => noise_factor,
        rate_per_store => rate_per_store_hz,
        duration_s => duration_s,
        rounds => rounds,
        warmup_s => warmup_s,
        store_in_flight_max => store_in_flight_max,
        claim_batch_max => claim_batch_max,
        idle_poll_ms => idle_poll_ms,
        utilisation_target => utilisation_target,
        calibration_s => calibration_s,
        latency => latency,
        burst_actions_min => burst_actions_min,
    );
    cfg.workers = a.workers.or(cfg.workers);
    cfg.concurrency = a.concurrency.or(cfg.concurrency);
    cfg.store_cap_sized |= a.size_store_cap;
    probes_on(&mut cfg.probes, &a.probe);
    cfg.scenarios = scenarios_of(&a.scenarios);
    flow_flags(a, &mut cfg.flow);
    cfg.validate().map_err(anyhow::Error::msg)?;
    cfg.calibration().map_err(anyhow::Error::msg)?;
    Ok(cfg)
}

/// The flow scenarios' flags given, over the defaults (or the smoke's).
fn flow_flags(a: &FairnessArgs, f: &mut fairness::FlowConfig) {
    macro_rules! set {
        ($($flag:ident => $field:ident),* $(,)?) => { $(if let Some(v) = a.$flag { f.$field = v; })* };
    }
    set!(
        store_rate => store_rate_per_s,
        store_burst => store_burst,
        store_burst_actions => store_burst_actions,
        window_s => window_s,
        windows => windows,
        flow_rounds => rounds,
        provider_ceiling => ceiling_per_s,
        offered_rate => offered_per_s,
        throttled_load_s => throttled_load_s,
    );
    if let Some(rate) = a.fake_rate_limit {
        f.fake_limit_per_s = rate.milli_per_s() as f64 / 1000.0;
    }
    f.fake_burst = a.fake_rate_burst.or(f.fake_burst);
}

/// What one shape's run is about to measure, before it starts.
fn say_fairness_setup(a: &FairnessArgs, cfg: &FairnessConfig) {
    say(
        a.json,
        "PostgreSQL: a cluster of its own in a temporary directory, synchronous_commit=off \
         (this measures the scheduler, not the disk)",
    );
    say(
        a.json,
        &format!(
            "load: {} stores at {}/s each, {} noisy at {}x · provider latency {} (mean {:.1} ms), faults off{}",
            cfg.stores,
            cfg.rate_per_store_hz,
            cfg.noisy_stores,
            cfg.noise_factor,
            cfg.latency,
            courier_bench::stats::latency_mean_ms(&cfg.latency),
            if a.smoke { " · SMOKE: timings are not judged" } else { "" }
        ),
    );
    let f = &cfg.flow;
    if cfg.scenarios.rate_limited_store {
        say(
            a.json,
            &format!(
                "rate-limited store: store-000 at {}/s (burst {}) under {} actions at once, {} x {} s windows, {} round(s)",
                f.store_rate_per_s, f.store_burst, f.store_burst_actions, f.windows, f.window_s, f.rounds
            ),
        );
    }
    if cfg.scenarios.provider_429 {
        say(
            a.json,
            &format!(
                "provider 429: the fake at {}/s, courier's ceiling {}/s, {}/s offered for {} s",
                f.fake_limit_per_s, f.ceiling_per_s, f.offered_per_s, f.throttled_load_s
            ),
        );
    }
    if cfg.calibration_s > 0 && (cfg.workers.is_none() || cfg.concurrency.is_none()) {
        say(
            a.json,
            &format!(
                "capacity: sized for {:.0}% utilisation after a {} s calibration run at the baseline load",
                cfg.utilisation_target * 100.0,
                cfg.calibration_s
            ),
        );
    }
}

async fn run_enqueue(a: EnqueueArgs) -> anyhow::Result<ExitCode> {
    use courier_bench::enqueue::{self, EnqueueConfig, Path};
    let seed = a.seed.unwrap_or_else(rand::random);
    say(
        a.json,
        &format!("courier bench enqueue: seed {seed} (--seed {seed})"),
    );
    let mut cfg = if a.smoke {
        EnqueueConfig::smoke(seed)
    } else {
        EnqueueConfig::new(seed)
    };
    macro_rules! set {
        ($($flag:ident),* $(,)?) => { $(if let Some(v) = a.$flag { cfg.$flag = v; })* };
    }
    set!(seconds, clients, batch_clients, batch, stores);
    cfg.keyed = !a.no_keys;
    cfg.tokens = !a.no_tokens;
    cfg.validate().map_err(anyhow::Error::msg)?;
    let paths: Vec<Path> = match &a.paths {
        None => Path::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| {
                Path::ALL
                    .into_iter()
                    .find(|p| p.name().replace(' ', "-") == *n)
                    .ok_or_else(|| anyhow::anyhow!("unknown path {n:?}"))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    say(
        a.json,
        &format!(
            "PostgreSQL: a cluster of its own (synchronous commit on); {} s a path, {} clients single, {} x {} batched{}",
            cfg.seconds,
            cfg.clients,
            cfg.batch_clients,
            cfg.batch,
            if a.smoke { " · SMOKE: rates are not judged" } else { "" }
        ),
    );
    let report = enqueue::run(&cfg, &paths).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!();
        print!("{}", report.table());
    }
    say(a.json, &format!("wall time {:.0} s", report.wall_time_s));
    Ok(ExitCode::SUCCESS)
}

async fn run_throughput(a: ThroughputArgs) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or_else(rand::random);
    say(
        a.json,
        &format!("courier bench throughput: seed {seed} (--seed {seed})"),
    );
    let mut cfg = if a.smoke {
        ThroughputConfig::smoke(seed)
    } else {
        ThroughputConfig::new(seed)
    };
    macro_rules! set {
        ($($flag:ident => $field:ident),* $(,)?) => { $(if let Some(v) = a.$flag { cfg.$field = v; })* };
    }
    set!(
        actions => actions,
        stores => stores,
        workers => workers,
        concurrency => concurrency,
        claim_batch_max => claim_batch_max,
        store_in_flight_max => store_in_flight_max,
        pool_size => pool_size_max,
        claim => claim,
        pgbench_clients => pgbench_clients,
        pgbench_seconds => pgbench_seconds,
        timeout_s => timeout_s,
    );
    cfg.synchronous_commit = match a.synchronous_commit.as_str() {
        "on" => vec![true],
        "off" => vec![false],
        _ => vec![true, false],
    };
    cfg.validate().map_err(anyhow::Error::msg)?;
    say(
        a.json,
        &format!(
            "PostgreSQL: a cluster of its own in a temporary directory; workers, provider and webhook API run in this process{}",
            if a.smoke { " · SMOKE: timings are not judged" } else { "" }
        ),
    );
    let report = throughput::run(&cfg).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!();
        print!("{}", report.table());
    }
    say(a.json, &format!("wall time {:.0} s", report.wall_time_s));
    Ok(ExitCode::SUCCESS)
}

async fn run_scale(a: ScaleArgs) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or_else(rand::random);
    say(a.json, &format!("courier bench scale: seed {seed}"));
    let mut cfg = if a.smoke {
        ScaleConfig::smoke(seed)
    } else {
        ScaleConfig::new(seed)
    };
    macro_rules! set {
        ($($flag:ident => $field:ident),* $(,)?) => { $(if let Some(v) = a.$flag { cfg.$field = v; })* };
    }
    set!(
        registered => registered,
        active => active,
        many_active => many_active,
        scheduled => scheduled,
        actions => actions,
        claimers => claimers,
        claim_batch_max => claim_batch_max,
        store_in_flight_max => store_in_flight_max,
        slices => slices,
        slice_ms => slice_ms,
    );
    cfg.validate().map_err(anyhow::Error::msg)?;
    say(
        a.json,
        &format!(
            "PostgreSQL: a cluster of its own in a temporary directory, synchronous_commit=off; \
             idle stores seeded by SQL; claimers claim and settle in this process{}",
            if a.smoke {
                " · SMOKE: timings are not judged"
            } else {
                ""
            }
        ),
    );
    let mut report = scale::run(&cfg).await?;
    courier_bench::chart::write_scale(&mut report, &a.chart)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!();
        print!("{}", report.table());
    }
    say(
        a.json,
        &format!(
            "chart: {} · wall time {:.0} s",
            a.chart.display(),
            report.wall_time_s
        ),
    );
    Ok(ExitCode::SUCCESS)
}

async fn run_matrix(a: FairnessArgs) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or_else(rand::random);
    say(
        a.json,
        &format!("courier bench fairness --matrix: seed {seed} (--seed {seed})"),
    );
    let mut m = MatrixConfig::new(seed);
    let cfg = &mut m.base;
    macro_rules! set {
        ($($flag:ident => $field:ident),* $(,)?) => { $(if let Some(v) = a.$flag { cfg.$field = v; })* };
    }
    set!(
        duration_s => duration_s,
        rounds => rounds,
        warmup_s => warmup_s,
        store_in_flight_max => store_in_flight_max,
        claim_batch_max => claim_batch_max,
        idle_poll_ms => idle_poll_ms,
        utilisation_target => utilisation_target,
        calibration_s => calibration_s,
        latency => latency,
        burst_actions_min => burst_actions_min,
    );
    cfg.workers = a.workers;
    cfg.concurrency = a.concurrency;
    probes_on(&mut cfg.probes, &a.probe);
    if let Some(cells) = a.cells {
        m.cells = cells;
    }
    if let Some(v) = a.total_rate {
        m.total_rate_hz = v;
    }
    if let Some(v) = a.offered_max {
        m.offered_max_hz = v;
    }
    m.validate().map_err(anyhow::Error::msg)?;
    say(
        a.json,
        &format!(
            "{} cells, each a fairness run on a cluster of its own (synchronous_commit=off): \
             {:.0}/s in every baseline, capacity sized for {:.0}% of the noisy scenarios' load",
            m.cells.len(),
            m.total_rate_hz,
            m.base.utilisation_target * 100.0
        ),
    );
    let mut report = matrix::run(&m).await?;
    courier_bench::chart::write_matrix(&mut report, &a.chart)?;
    if a.json {
        // The table goes with the rest of the run's telling, to stderr.
        eprint!("\n{}", report.table());
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!();
        print!("{}", report.table());
    }
    say(
        a.json,
        &format!(
            "chart: {} · wall time {:.0} s",
            a.chart.display(),
            report.wall_time_s
        ),
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
struct ProviderArgs {
    /// Sends to make.
    #[arg(long, default_value_t = 200_000)]
    sends: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Stop after this many seconds even if not all sends were made.
    #[arg(long)]
    seconds: Option<u64>,
    /// Keep the provider's log here (default: a temporary file, removed).
    #[arg(long, value_name = "PATH")]
    log: Option<PathBuf>,
}

async fn run_provider(b: ProviderArgs) -> anyhow::Result<ExitCode> {
    let cfg = courier_bench::provider::BenchConfig {
        sends: b.sends,
        concurrency: b.concurrency,
        seconds: b.seconds,
        log_path: b.log,
    };
    eprintln!(
        "courier bench provider: {} sends, concurrency {}, faults off, latency 0",
        cfg.sends, cfg.concurrency
    );
    let r = courier_bench::provider::run(cfg).await?;
    println!(
        "sends {} in {:.2} s: {:.0} sends/s; errors {}",
        r.sends,
        r.elapsed.as_secs_f64(),
        r.sends_per_s,
        r.errors
    );
    println!(
        "latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        r.p50_us as f64 / 1000.0,
        r.p99_us as f64 / 1000.0,
        r.max_us as f64 / 1000.0
    );
    println!(
        "log lines written {} ({:.1} MiB)",
        r.log_lines,
        r.log_bytes as f64 / (1024.0 * 1024.0)
    );
    Ok(if r.errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
