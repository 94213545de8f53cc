//! `courier`: the one binary. It parses flags, sets up tracing and calls a
//! library `run`; the work lives in the crates.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmd;

#[derive(Parser)]
#[command(
    name = "courier",
    version,
    about = "Exactly-once effects over unreliable networks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// The main job: PostgreSQL, the flaky provider, a server and workers;
    /// 2,000 actions across 100 stores; then the verifier's table.
    Demo(cmd::demo::Args),
    /// The enqueue API and the provider's status webhooks.
    Serve(cmd::serve::Args),
    /// A worker process (run as many as you like).
    Worker(cmd::worker::Args),
    /// A fault run of real processes (SIGKILLs, a PostgreSQL crash-restart,
    /// frozen workers), judged by the provider's log.
    Chaos(cmd::chaos::Args),
    /// Benchmarks: fairness across stores, and throughput against the
    /// PostgreSQL ceiling.
    Bench(cmd::bench::Args),
    /// Enqueue actions straight into the database (one from flags, or
    /// many from JSON lines), through the same SQL enqueue as every caller.
    Enqueue(cmd::enqueue::Args),
    /// Counts by state, per-store backlog, oldest open intent.
    Status(cmd::status::Args),
    /// Cancel a scheduled or pending action (exit 1 if a worker holds it
    /// or it has ended).
    Cancel(cmd::intent::Args),
    /// Re-drive an action the provider refused with a 400, or one resolved
    /// as not sent, as a new action with a new key (exit 1 for any other
    /// ending).
    Redrive(cmd::intent::Args),
    /// Resolve an action held unknown (its provider's tier could not tell
    /// whether it went out) as `sent` or `not-sent` (exit 1 if it is not
    /// held unknown).
    Resolve(cmd::intent::ResolveArgs),
    /// API tokens: create (printed once), list, revoke.
    Token(cmd::token::Args),
    /// A store's flow control: set, show or list its rate, burst and
    /// in-flight cap (running workers obey a change at their next claim).
    Store(cmd::store::Args),
    /// The managed local PostgreSQL: start | stop | status | url.
    Db(cmd::db::Args),
    /// A named provider's setup checked without sending anything (`check`),
    /// and a provider's ceiling and pause (`limit`, `gate`).
    Providers(cmd::providers::Args),
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
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // RUST_LOG takes `level` and `target=level` directives, comma-separated
    // (`warn,courier_dispatch=debug`); one it cannot read is reported and
    // the default used.
    const DEFAULT_LOG: &str = "warn,deadpool.postgres=error";
    let (filter, bad_filter) = match std::env::var("RUST_LOG") {
        Ok(v) => match v.parse::<tracing_subscriber::filter::Targets>() {
            Ok(t) => (t, None),
            Err(e) => (DEFAULT_LOG.parse().expect("static filter"), Some((v, e))),
        },
        Err(_) => (DEFAULT_LOG.parse().expect("static filter"), None),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colours for a terminal, plain text for the log files of
                // the demo's and chaos's child processes.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(filter)
        .init();
    if let Some((v, e)) = bad_filter {
        tracing::warn!("RUST_LOG={v:?} is not a list of level or target=level directives ({e}); using {DEFAULT_LOG:?}");
    }
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
            Command::Demo(a) => cmd::demo::run(a).await,
            Command::Serve(a) => cmd::serve::run(a).await,
            Command::Worker(a) => cmd::worker::run(a).await,
            Command::Chaos(a) => cmd::chaos::run(a).await,
            Command::Bench(a) => cmd::bench::run(a).await,
            Command::Enqueue(a) => cmd::enqueue::run(a).await,
            Command::Status(a) => cmd::status::run(a).await,
            Command::Cancel(a) => cmd::intent::cancel(a).await,
            Command::Redrive(a) => cmd::intent::redrive(a).await,
            Command::Resolve(a) => cmd::intent::resolve(a).await,
            Command::Providers(a) => cmd::providers::run(a).await,
            Command::Token(a) => cmd::token::run(a).await,
            Command::Store(a) => cmd::store::run(a).await,
            Command::Db(a) => cmd::db::run(a).await,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_subcommand_is_well_formed() {
        Cli::command().debug_assert();
    }
}
