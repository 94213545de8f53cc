//! `courier providers check NAME`: a named provider's setup, checked
//! without sending a message (`courier_providers::check` says what can and
//! cannot be checked that way). `courier providers limit NAME` and `gate
//! NAME`: a provider gate's ceiling, set and shown straight on the database
//! through the same SQL function as `PUT /v1/providers/{name}`
//! (`courier.provider_configure`, migration 27; an `events` row
//! `provider_settings` names the caller `cli:<$USER>`).
//!
//! Exit codes of `check`: 0 every check passed; 1 a check found the setup
//! wrong or could not tell; 2 settings missing or invalid. Of `limit` and
//! `gate`: 0 done; 2 a value refused (nothing changed), no such gate, bad
//! flags, or the database unreachable.

use super::common::DbArgs;
use super::store::{caller, rate_text, refused, tokens_text};
use courier_core::rate::{validate_name, ProviderSettings};
use courier_providers::check::{self, Found};
use courier_providers::settings::Settings;
use courier_providers::Named;
use courier_store::{FlowError, ProviderFlow};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Check a named provider's settings, credentials and webhook route,
    /// sending nothing.
    Check(CheckArgs),
    /// Set a provider gate's ceiling, for every worker that names it
    /// (`courier worker --provider-gate`, by default the provider's name),
    /// replacing it: no flags, no ceiling. A pause in force stays.
    Limit(LimitArgs),
    /// A provider gate: its ceiling, its bucket's tokens, its pause.
    Gate(GateArgs),
}

#[derive(clap::Args)]
struct LimitArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The gate's name (1 to 64 of A-Z a-z 0-9 . _ -).
    name: String,
    /// Sends a second at most to this provider, from all workers together
    /// (0.001 to 100000). Left out: no ceiling.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    rate_per_s: Option<f64>,
    /// How many sends may leave at once after a quiet spell (1 to 100000;
    /// only with --rate-per-s). Left out: one second's worth.
    #[arg(long, value_name = "B", allow_negative_numbers = true)]
    burst: Option<u32>,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct GateArgs {
    #[command(flatten)]
    db: DbArgs,
    name: String,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// twilio, telnyx or infobip.
    name: Named,
    /// Its settings as `NAME=value` lines (the environment fills the rest).
    #[arg(long, env = "COURIER_CREDENTIALS_FILE")]
    credentials_file: Option<PathBuf>,
    /// Its API (default: its public one).
    #[arg(long)]
    provider_url: Option<String>,
    /// A courier server to check the webhook route of
    /// (`<URL>/v1/webhooks/<name>`).
    #[arg(long)]
    server: Option<String>,
    /// Time-out of each request.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Check(a) => run_check(a).await,
        Command::Limit(a) => run_limit(a).await,
        Command::Gate(a) => run_gate(a).await,
    }
}

async fn run_limit(a: LimitArgs) -> anyhow::Result<ExitCode> {
    let settings = ProviderSettings {
        rate_per_s: a.rate_per_s,
        burst: a.burst,
    };
    // Checked before connecting: a refusal needs no database.
    let checked = validate_name("provider", &a.name).and_then(|()| settings.validate());
    if let Err(e) = checked {
        return Ok(refused(&e));
    }
    let store = a.db.connect(1).await?;
    match store
        .provider_configure(&a.name, &settings, &caller())
        .await
    {
        Ok(gate) => {
            print_gate(&gate, a.json)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(FlowError::Invalid(e)) => Ok(refused(&e)),
        Err(FlowError::Store(e)) => Err(e.into()),
    }
}

async fn run_gate(a: GateArgs) -> anyhow::Result<ExitCode> {
    let store = a.db.connect(1).await?;
    match store.provider_flow(&a.name).await? {
        Some(gate) => {
            print_gate(&gate, a.json)?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!(
                "no provider gate {:?}: never given a ceiling, never paused",
                a.name
            );
            Ok(ExitCode::from(2))
        }
    }
}

fn print_gate(g: &ProviderFlow, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(g)?);
        return Ok(());
    }
    let s = &g.settings;
    println!("provider gate {}", g.provider);
    println!("  ceiling     {}", rate_text(s.rate_per_s, s.burst));
    println!("  tokens now  {}", tokens_text(g.tokens));
    println!(
        "  paused      {}",
        g.paused_ms
            .map_or("no".into(), |ms| format!("for {ms} ms more"))
    );
    println!("  pauses      {}", g.pauses);
    println!(
        "  configured  {}",
        g.configured_at.map_or("never".into(), |t| t
            .format("%Y-%m-%d %H:%M:%S UTC")
            .to_string())
    );
    Ok(())
}

async fn run_check(a: CheckArgs) -> anyhow::Result<ExitCode> {
    let named = a.name;
    let settings =
        match Settings::load(named.settings_names(), a.credentials_file.as_deref(), |k| {
            std::env::var(k).ok()
        }) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                return Ok(ExitCode::from(2));
            }
        };
    let tier = named.tier(&settings);
    println!(
        "{named}: tier {tier}, {} (docs/providers.md)",
        tier.promise()
    );
    let mut missing = false;
    for name in named.settings_names() {
        let set = settings.optional(name).is_some();
        println!("  {name:<30} {}", if set { "set" } else { "not set" });
        missing |= !set && !name.contains("IDEMPOTEN");
    }
    if missing {
        eprintln!("settings missing: nothing checked further");
        return Ok(ExitCode::from(2));
    }
    let Some(base) = a
        .provider_url
        .clone()
        .or_else(|| named.default_base_url().map(str::to_string))
    else {
        eprintln!("{named} needs --provider-url (its API's address is per account)");
        return Ok(ExitCode::from(2));
    };
    let timeout = Duration::from_millis(a.timeout_ms);
    let req = match check::credentials_request(named, &settings, &base) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    println!("a worker would send through {base} with these credentials;");
    println!("credentials (GET {}, nothing sent):", req.url);
    let mut ok = report(check::check_credentials(&req, timeout).await);
    match &a.server {
        Some(server) => {
            let route = format!("{}/v1/webhooks/{named}", server.trim_end_matches('/'));
            println!("webhook route (an unsigned POST to {route}):");
            ok &= report(check::check_route(&route, timeout).await);
        }
        None => println!("webhook route: not checked (--server URL checks it)"),
    }
    println!(
        "not checked without sending: that a message would go out (the sender, the \
         destination, the balance), that the provider's callbacks reach the server from \
         where the provider is{}",
        if named == Named::Infobip {
            ", and that Infobip has turned idempotent sending on for the account (only \
             Infobip can confirm it)"
        } else {
            ""
        }
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints a check's finding; true when it passed.
fn report(found: Found) -> bool {
    match found {
        Found::Ok(m) => {
            println!("  ok: {m}");
            true
        }
        Found::Wrong(m) => {
            println!("  WRONG: {m}");
            false
        }
        Found::Unknown(m) => {
            println!("  could not tell: {m}");
            false
        }
    }
}
