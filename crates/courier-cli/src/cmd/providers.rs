//! `courier providers check NAME`: a named provider's setup, checked
//! without sending a message (`courier_providers::check` says what can and
//! cannot be checked that way).
//!
//! Exit codes: 0 every check passed; 1 a check found the setup wrong or
//! could not tell; 2 settings missing or invalid.

use courier_providers::check::{self, Found};
use courier_providers::settings::Settings;
use courier_providers::Named;
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
    }
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
