//! `courier`: the one binary. It parses flags, sets up tracing and calls a
//! library `run`; the work lives in the crates.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmd;

#[derive(Parser)]
#[command(name = "courier", version, about = "Exactly-once effects over unreliable networks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the flaky fake SMS provider (follows docs/provider-api.md).
    Provider(cmd::provider::Args),
    /// Verify a provider's log: exactly one effect per action, no blind resends.
    Verify(cmd::verify::Args),
    /// Run a seeded simulation of a delivery guarantee.
    Sim(cmd::sim::Args),
    /// Serve the interactive lesson page.
    Lesson(cmd::lesson::Args),
    /// The etcd + NATS JetStream relay and its lab.
    Relay(cmd::relay::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Provider(a) => cmd::provider::run(a).await,
            Command::Verify(a) => cmd::verify::run(a).await,
            Command::Sim(a) => cmd::sim::run(a).await,
            Command::Lesson(a) => cmd::lesson::run(a).await,
            Command::Relay(a) => cmd::relay::run(a).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
