//! `courier provider`: run the flaky fake SMS provider. Flags only; the work
//! is in `courier-fake` (its benchmark is `courier bench provider`).

use anyhow::Context;
use courier_fake::config::TIERS;
use courier_fake::{FakeConfig, FakeProvider, FaultRates, Latency, MsRange};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on; port 0 picks a free port. The chosen address is
    /// printed on stdout as `courier provider listening on http://HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:7100")]
    pub listen: SocketAddr,
    /// Also write `http://HOST:PORT` to this file once listening.
    #[arg(long, value_name = "PATH")]
    addr_file: Option<PathBuf>,
    /// The append-only log (JSON lines); an existing log is recovered.
    #[arg(long, value_name = "PATH")]
    pub log: PathBuf,
    /// Bearer token every request must carry.
    #[arg(long, env = "COURIER_PROVIDER_API_KEY", hide_env_values = true)]
    pub api_key: String,
    /// HMAC-SHA256 key of webhook signatures.
    #[arg(long, env = "COURIER_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: String,
    /// Seed of every fault and timing decision (printed on start).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// `off` sets the four fault rates to zero (latency and lookup lag keep
    /// their own flags, both 0 by default).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    faults: String,
    /// Same as `--faults off`.
    #[arg(long)]
    no_faults: bool,
    /// Share of first sends (with --ignore-key: of all sends) whose answer is
    /// lost (half after creating the message, half before).
    #[arg(long, default_value_t = FaultRates::DEFAULT.timeout)]
    timeout_rate: f64,
    /// How long a lost answer is held before `504` (longer than a client's time-out).
    #[arg(long, default_value_t = 5_000)]
    timeout_hold_ms: u64,
    /// Share of status events delivered twice (same event_id).
    #[arg(long, default_value_t = FaultRates::DEFAULT.duplicate_webhook)]
    duplicate_webhook_rate: f64,
    /// Share of messages whose `sent` webhook comes after the final one.
    #[arg(long, default_value_t = FaultRates::DEFAULT.out_of_order)]
    out_of_order_rate: f64,
    /// Share of messages that fail some time after `sent`.
    #[arg(long, default_value_t = FaultRates::DEFAULT.late_failed)]
    late_failed_rate: f64,
    /// Lookups answer 404 for this long after a key's first send (with
    /// --ignore-key: after each message's creation).
    #[arg(long, default_value_t = 0)]
    lookup_lag_ms: u64,
    /// Admit at most N sends a second (`N/s` or `N`), a token bucket; a send
    /// over it is answered 429 with `Retry-After` (whole seconds until a
    /// token is back) and creates nothing. Lookups and webhooks are not
    /// metered, so a client can always find out what its 429'd sends did.
    #[arg(long, value_name = "N/s")]
    rate_limit: Option<courier_fake::SendRate>,
    /// Sends admitted at once after a quiet spell (default: N rounded up,
    /// at least 1).
    #[arg(long, value_name = "B", requires = "rate_limit",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rate_burst: Option<u32>,
    /// Do not deduplicate: every valid send creates a new message (no replay,
    /// no 409, no 422), and the key is only the client's reference; a lookup
    /// answers the earliest message sent with it. The time-out fault applies
    /// to every send. Tier b (with --lookup-lag-ms N) or, with --no-lookup,
    /// tier c. A restart must be given the same flag: a log written in the
    /// other mode is refused.
    #[arg(long, conflicts_with = "tier")]
    ignore_key: bool,
    /// Answer every lookup `501 {"error":"lookup_not_supported"}` (logged
    /// `faulted`). Tier a-, or with --ignore-key tier c.
    #[arg(long, conflicts_with = "tier")]
    no_lookup: bool,
    /// Behave as a provider of this guarantee tier: a (the contract, the
    /// default), a- (= --no-lookup), b (= --ignore-key; add --lookup-lag-ms N
    /// for the lag it states) or c (= --ignore-key --no-lookup).
    #[arg(
        long,
        value_name = "TIER",
        value_parser = clap::builder::PossibleValuesParser::new(TIERS.map(|t| t.name))
    )]
    tier: Option<String>,
    /// Speak as this provider: `contract` (courier's own contract, the
    /// default) or a named provider's double (its endpoints, fields, errors
    /// and signed callbacks, over the same faults and the same log).
    #[arg(long, default_value = "contract")]
    dialect: courier_fake::dialect::Dialect,
    /// Latency of each send and lookup, in milliseconds: `0`, a fixed `25`,
    /// `uniform:5..50` (uniform, inclusive) or `lognormal:median=20,sigma=0.6`.
    #[arg(long, default_value = "0", value_name = "DIST")]
    latency_ms: Latency,
    /// Keys are forgotten this long after their first send (with
    /// --ignore-key: each send this long after it ended).
    #[arg(long, default_value_t = 3_600)]
    key_retention_s: u64,
    /// Delay from accepted to sent, `MIN..MAX` milliseconds.
    #[arg(long, default_value = "20..200")]
    sent_after_ms: MsRange,
    /// Delay from sent to delivered, `MIN..MAX` milliseconds.
    #[arg(long, default_value = "50..500")]
    delivered_after_ms: MsRange,
    /// Delay from sent to a late failed, `MIN..MAX` milliseconds.
    #[arg(long, default_value = "500..2000")]
    failed_after_ms: MsRange,
    /// Webhook URL for messages sent without `status_callback`.
    #[arg(long, value_name = "URL")]
    default_callback: Option<String>,
    /// POSTs of one status event before giving up on it.
    #[arg(long, default_value_t = 8)]
    webhook_attempts_max: u32,
    /// Time-out of one webhook POST.
    #[arg(long, default_value_t = 2_000)]
    webhook_timeout_ms: u64,
    /// First backoff between webhook attempts (doubles, jittered).
    #[arg(long, default_value_t = 100)]
    webhook_backoff_base_ms: u64,
    /// Longest backoff between webhook attempts.
    #[arg(long, default_value_t = 2_000)]
    webhook_backoff_cap_ms: u64,
    /// Webhook POSTs in flight at once.
    #[arg(long, default_value_t = 32)]
    webhook_concurrency_max: usize,
    /// Largest send body read; larger ones are answered 413.
    #[arg(long, default_value_t = 64 * 1024)]
    request_bytes_max: usize,
    /// Keys remembered at once; new keys beyond it are answered 503 (with
    /// --ignore-key it counts sends remembered, each message among them).
    #[arg(long, default_value_t = 5_000_000)]
    keys_max: usize,
    /// fdatasync the log after every write (power-loss durability; slower).
    #[arg(long)]
    fsync: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    run_serve(args).await
}

fn config(a: Args) -> anyhow::Result<FakeConfig> {
    let mut cfg = FakeConfig::new(a.log, &a.api_key, &a.webhook_secret);
    cfg.seed = a.seed;
    cfg.faults = if a.no_faults || a.faults == "off" {
        FaultRates::NONE
    } else {
        FaultRates {
            timeout: a.timeout_rate,
            duplicate_webhook: a.duplicate_webhook_rate,
            out_of_order: a.out_of_order_rate,
            late_failed: a.late_failed_rate,
        }
    };
    cfg.timeout_hold_ms = a.timeout_hold_ms;
    cfg.dialect = a.dialect;
    match &a.tier {
        Some(tier) => cfg.set_tier(tier).map_err(|e| anyhow::anyhow!(e))?,
        None => {
            cfg.ignore_key = a.ignore_key;
            cfg.lookup = !a.no_lookup;
        }
    }
    cfg.lookup_lag_ms = a.lookup_lag_ms;
    cfg.rate_limit = a.rate_limit;
    cfg.rate_burst = a.rate_burst;
    cfg.latency = a.latency_ms;
    cfg.key_retention_ms = a
        .key_retention_s
        .checked_mul(1000)
        .context("--key-retention-s is too large")?;
    cfg.sent_after_ms = a.sent_after_ms;
    cfg.delivered_after_ms = a.delivered_after_ms;
    cfg.failed_after_ms = a.failed_after_ms;
    cfg.default_callback = a.default_callback;
    cfg.webhook_attempts_max = a.webhook_attempts_max;
    cfg.webhook_timeout_ms = a.webhook_timeout_ms;
    cfg.webhook_backoff_base_ms = a.webhook_backoff_base_ms;
    cfg.webhook_backoff_cap_ms = a.webhook_backoff_cap_ms;
    cfg.webhook_concurrency_max = a.webhook_concurrency_max;
    cfg.request_bytes_max = a.request_bytes_max;
    cfg.keys_max = a.keys_max;
    cfg.fsync = a.fsync;
    cfg.validate().map_err(|e| anyhow::anyhow!(e))?;
    Ok(cfg)
}

async fn run_serve(a: Args) -> anyhow::Result<ExitCode> {
    let listen = a.listen;
    let addr_file = a.addr_file.clone();
    let cfg = config(a)?;
    eprintln!(
        "courier provider: tier {} (ignore-key {}, lookup {}); seed {}; {}; latency-ms {}; lookup-lag-ms {}; timeout-hold-ms {}; key-retention-s {}",
        cfg.tier(),
        cfg.ignore_key,
        cfg.lookup,
        cfg.seed,
        cfg.faults,
        cfg.latency,
        cfg.lookup_lag_ms,
        cfg.timeout_hold_ms,
        cfg.key_retention_ms / 1000
    );
    eprintln!(
        "courier provider: sent-after-ms {}; delivered-after-ms {}; failed-after-ms {}; webhook attempts {}; default callback {}",
        cfg.sent_after_ms,
        cfg.delivered_after_ms,
        cfg.failed_after_ms,
        cfg.webhook_attempts_max,
        cfg.default_callback.as_deref().unwrap_or("none")
    );
    let log = cfg.log_path.clone();
    let provider = FakeProvider::open(cfg).await?;
    let r = provider.recovered();
    eprintln!(
        "courier provider: log {} ({} lines read, {} torn bytes cut; {} keys, {} messages, {} status changes and {} webhooks pending)",
        log.display(),
        r.lines,
        r.torn_bytes,
        r.keys,
        r.messages,
        r.transitions,
        r.webhooks
    );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let url = format!("http://{}", listener.local_addr()?);
    if let Some(path) = &addr_file {
        write_atomically(path, &format!("{url}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "courier provider listening on {url}")?;
        out.flush()?;
    }
    provider.serve(listener, stop_signal()).await?;
    eprintln!("courier provider: stopped");
    Ok(ExitCode::SUCCESS)
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Resolves on SIGTERM or ctrl-c.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use courier_core::Tier;
    use courier_rig::spec::{FakeModes, FakeSpec};

    /// The rig's provider flags, parsed by `courier provider` itself.
    #[test]
    fn the_rigs_fake_spec_round_trips_through_the_provider_flags() {
        let spec = FakeSpec {
            listen: "127.0.0.1:0".into(),
            log: PathBuf::from("/tmp/run/provider.jsonl"),
            api_key: "key".into(),
            webhook_secret: "secret".into(),
            seed: 42,
            modes: FakeModes::default(),
            dialect: "contract".into(),
        };
        let argv = std::iter::once("courier".to_string()).chain(spec.args());
        let crate::Cli {
            command: crate::Command::Provider(a),
        } = crate::Cli::try_parse_from(argv).expect("the rig's flags parse")
        else {
            panic!("not the provider command");
        };
        assert_eq!(a.listen.to_string(), spec.listen);
        assert_eq!(
            (a.log, a.api_key, a.webhook_secret, a.seed),
            (spec.log, spec.api_key, spec.webhook_secret, spec.seed)
        );
        // Faults stay on: the rig's runs are judged under them.
        assert!(!a.no_faults && a.faults == "on");
    }

    /// Each tier's modes, as the rig writes them, reach the fake.
    #[test]
    fn the_rigs_tier_modes_round_trip_through_the_provider_flags() {
        for tier in Tier::ALL {
            let modes = FakeModes::for_tier(tier, 50);
            let spec = FakeSpec {
                listen: "127.0.0.1:0".into(),
                log: PathBuf::from("/tmp/run/provider.jsonl"),
                api_key: "key".into(),
                webhook_secret: "secret".into(),
                seed: 42,
                modes,
                dialect: "contract".into(),
            };
            let argv = std::iter::once("courier".to_string()).chain(spec.args());
            let crate::Command::Provider(a) = crate::Cli::try_parse_from(argv)
                .expect("the rig's flags parse")
                .command
            else {
                panic!("not the provider command");
            };
            let cfg = config(a).unwrap_or_else(|e| panic!("{tier}: {e}"));
            assert_eq!(
                (cfg.ignore_key, cfg.lookup, cfg.lookup_lag_ms),
                (modes.ignore_key, !modes.no_lookup, modes.lookup_lag_ms),
                "{tier}"
            );
            assert_eq!(cfg.tier(), tier.as_str().trim_end_matches("-resend"));
        }
    }

    /// The rig's flow-control modes (no faults, the fake's own rate limit)
    /// reach the fake.
    #[test]
    fn the_rigs_flow_modes_round_trip_through_the_provider_flags() {
        let spec = FakeSpec {
            listen: "127.0.0.1:0".into(),
            log: PathBuf::from("/tmp/run/provider.jsonl"),
            api_key: "key".into(),
            webhook_secret: "secret".into(),
            seed: 42,
            modes: FakeModes {
                faults_off: true,
                rate_limit: Some(20),
                ..FakeModes::default()
            },
            dialect: "contract".into(),
        };
        let argv = std::iter::once("courier".to_string()).chain(spec.args());
        let crate::Command::Provider(a) = crate::Cli::try_parse_from(argv)
            .expect("the rig's flags parse")
            .command
        else {
            panic!("not the provider command");
        };
        let cfg = config(a).unwrap();
        assert_eq!(
            cfg.rate_limit,
            Some(courier_fake::SendRate::per_s(20.0).unwrap())
        );
        assert_eq!(cfg.faults.timeout, 0.0);
    }

    fn parse(flags: &[&str]) -> Result<Args, clap::Error> {
        let argv = ["courier", "provider", "--log", "p.jsonl"]
            .into_iter()
            .chain(["--api-key", "k", "--webhook-secret", "s"])
            .chain(flags.iter().copied());
        match crate::Cli::try_parse_from(argv)?.command {
            crate::Command::Provider(a) => Ok(a),
            _ => panic!("not the provider command"),
        }
    }

    #[test]
    fn tier_flags_set_the_fakes_two_modes() {
        let modes = |flags: &[&str]| {
            let cfg = config(parse(flags).expect("the flags parse")).expect("valid");
            (cfg.tier(), cfg.ignore_key, cfg.lookup)
        };
        assert_eq!(modes(&[]), ("a", false, true));
        assert_eq!(modes(&["--no-lookup"]), ("a-", false, false));
        assert_eq!(modes(&["--ignore-key"]), ("b", true, true));
        assert_eq!(modes(&["--ignore-key", "--no-lookup"]), ("c", true, false));
        assert_eq!(modes(&["--tier", "c"]), ("c", true, false));
        assert_eq!(
            modes(&["--tier", "b", "--lookup-lag-ms", "50"]),
            ("b", true, true)
        );
        assert!(
            parse(&["--tier", "b", "--ignore-key"]).is_err(),
            "conflicts"
        );
        assert!(parse(&["--tier", "d"]).is_err());
    }
}
