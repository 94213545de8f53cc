//! `courier serve`: the enqueue API, the provider's status webhooks, the
//! live dashboard (`/`), `/metrics` and `/openapi.json`.

use super::common::{shutdown_on_signal, DbArgs, LimitArgs};
use anyhow::Context;
use courier_dispatch::auth::Auth;
use courier_dispatch::metrics::SamplerConfig;
use courier_dispatch::server::{serve, HttpLimits, ServerConfig};
use courier_providers::settings::Settings;
use courier_providers::{Named, WebhookRegistry};
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
    /// A secret also accepted on webhooks while the provider moves to the
    /// new one (rotation); repeat for more.
    #[arg(long, env = "COURIER_WEBHOOK_SECRET_PREVIOUS", value_delimiter = ',')]
    webhook_secret_previous: Vec<String>,
    /// An admin token (every store, the dashboard's data, /metrics), besides
    /// the tokens of `courier token create`.
    #[arg(long, env = "COURIER_API_TOKEN")]
    api_token: Option<String>,
    /// Listen beyond loopback with no token at all: anyone who reaches the
    /// port can send text messages on your bill. Without it, `serve`
    /// refuses to.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Longest time one HTTP request may take, reading its body included.
    #[arg(long, default_value_t = 30_000)]
    http_timeout_ms: u64,
    /// Longest time a client may take to send a request's head (slow clients,
    /// idle keep-alive connections).
    #[arg(long, default_value_t = HttpLimits::default().header_read_timeout_ms)]
    header_read_timeout_ms: u64,
    /// HTTP connections served at once (more wait in the accept queue).
    #[arg(long, default_value_t = HttpLimits::default().connections_max)]
    connections_max: usize,
    /// Named providers whose status webhooks this server takes, each on
    /// `POST /v1/webhooks/<name>` and checked with its own scheme
    /// (twilio, telnyx, infobip: docs/providers.md); comma-separated.
    #[arg(long, value_delimiter = ',')]
    provider_webhooks: Vec<String>,
    /// Their settings as `NAME=value` lines (the environment fills what the
    /// file lacks).
    #[arg(long, env = "COURIER_CREDENTIALS_FILE")]
    credentials_file: Option<std::path::PathBuf>,
    /// The scheme and host the providers call this server at, when it sits
    /// behind a proxy (schemes that sign the URL, Twilio's, need it);
    /// default: `http://` and the request's Host.
    #[arg(long)]
    public_url: Option<String>,
    /// How often the dashboard and the gauges are refreshed from the database.
    #[arg(long, default_value_t = 2_000)]
    sample_interval_ms: u64,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let limits = args.limits.limits()?;
    let http = HttpLimits {
        header_read_timeout_ms: args.header_read_timeout_ms,
        connections_max: args.connections_max,
        ..HttpLimits::default()
    };
    http.validate()?;
    let store = args.db.connect(16).await?;
    let open = args.api_token.is_none() && store.tokens_active().await?.1.is_empty();
    let exposed = courier_dispatch::server::beyond_loopback(&args.listen)
        .await
        .with_context(|| format!("resolving {}", args.listen))?;
    say_who_may_send(&args.listen, open, exposed, args.insecure_no_auth)?;
    let webhooks = provider_webhooks(&args)?;
    let auth = Auth::start(store.clone(), args.api_token.clone(), open);
    let shutdown = shutdown_on_signal();
    let app = courier_dispatch::dashboard::app(
        store,
        ServerConfig {
            limits: limits.clone(),
            webhook_secret: args.webhook_secret.into_bytes(),
            webhook_secrets_previous: args
                .webhook_secret_previous
                .into_iter()
                .map(String::into_bytes)
                .collect(),
            api_token: args.api_token,
            request_timeout: Duration::from_millis(args.http_timeout_ms),
            provider_webhooks: webhooks,
        },
        auth,
        SamplerConfig::for_limits(&limits, args.sample_interval_ms),
        shutdown.clone(),
    )?;
    let listener = courier_dispatch::server::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("courier serve listening on http://{addr}");
    std::io::stdout().flush()?;
    serve(listener, app, &http, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// Refuses an open API beyond loopback (unless `--insecure-no-auth`), and
/// says at start who may send.
fn say_who_may_send(listen: &str, open: bool, exposed: bool, insecure: bool) -> anyhow::Result<()> {
    match (open, exposed, insecure) {
        (false, _, _) => eprintln!(
            "courier serve: the API needs a token (admin: --api-token; stores: courier token create)"
        ),
        (true, true, false) => anyhow::bail!(
            "refusing to listen on {listen}: it reaches beyond this machine and no token protects \
             the API, so anyone who reaches it could send text messages on your bill. Create a \
             token first (courier token create --store S, or --admin) or pass --api-token; \
             --insecure-no-auth listens anyway"
        ),
        (true, true, true) => eprintln!(
            "WARNING: --insecure-no-auth: the API on {listen} has no token; anyone who reaches it \
             can send text messages on your bill"
        ),
        (true, false, _) => eprintln!(
            "courier serve: no token exists, so the API on {listen} is open to every process on \
             this machine (create one with courier token create and restart to require it)"
        ),
    }
    Ok(())
}

/// The named providers' webhook schemes, each with its settings.
fn provider_webhooks(args: &Args) -> anyhow::Result<WebhookRegistry> {
    let mut registry = WebhookRegistry::default().with_public_url(args.public_url.clone());
    for name in &args.provider_webhooks {
        let named: Named = name.parse().map_err(anyhow::Error::msg)?;
        let settings = Settings::load(
            named.settings_names(),
            args.credentials_file.as_deref(),
            |k| std::env::var(k).ok(),
        )?;
        registry = registry.with(named.as_str(), named.webhooks(&settings)?);
        eprintln!(
            "courier serve: {named} webhooks on /v1/webhooks/{named} (tier {})",
            named.tier(&settings)
        );
    }
    Ok(registry)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use courier_rig::spec::ServerSpec;

    /// The rig's server flags, parsed by `courier serve` itself.
    #[test]
    fn the_rigs_server_spec_round_trips_through_the_serve_flags() {
        let spec = ServerSpec {
            database_url: "postgres://postgres@127.0.0.1:5/db".into(),
            listen: "127.0.0.1:0".into(),
            webhook_secret: "secret".into(),
            named: None,
        };
        let argv = std::iter::once("courier".to_string()).chain(spec.args());
        let crate::Cli {
            command: crate::Command::Serve(a),
        } = crate::Cli::try_parse_from(argv).expect("the rig's flags parse")
        else {
            panic!("not the serve command");
        };
        assert_eq!(
            a.db.database_url.as_deref(),
            Some(spec.database_url.as_str())
        );
        assert_eq!(
            (a.listen, a.webhook_secret),
            (spec.listen, spec.webhook_secret)
        );
    }
}
