//! `courier serve`: the enqueue API and the provider's status webhooks.

use super::common::{shutdown_on_signal, DbArgs, LimitArgs};
use anyhow::Context;
use courier_dispatch::server::{router, ServerConfig};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// Address to listen on (port 0 picks a free one; the first line printed says which).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Shared secret of the provider's webhook signatures.
    #[arg(long, env = "COURIER_WEBHOOK_SECRET")]
    webhook_secret: String,
    /// Require `Authorization: Bearer <token>` on the API.
    #[arg(long, env = "COURIER_API_TOKEN")]
    api_token: Option<String>,
    /// Longest time one HTTP request may take, reading its body included.
    #[arg(long, default_value_t = 30_000)]
    http_timeout_ms: u64,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let limits = args.limits.limits()?;
    let store = args.db.connect(16).await?;
    let app = router(
        store,
        ServerConfig {
            limits,
            webhook_secret: args.webhook_secret.into_bytes(),
            api_token: args.api_token,
            request_timeout: Duration::from_millis(args.http_timeout_ms),
        },
    );
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("courier serve listening on http://{addr}");
    std::io::stdout().flush()?;
    let shutdown = shutdown_on_signal();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(ExitCode::SUCCESS)
}
