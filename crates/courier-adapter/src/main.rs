//! `courier-adapter`: courier in the public PostgreSQL queue benchmark.
//! Reads the harness's environment, logs to stderr, and runs
//! [`courier_adapter::run`] until SIGTERM or Ctrl-C, then exits 0.

use courier_adapter::config::Config;
use tokio_util::sync::CancellationToken;

fn main() -> std::process::ExitCode {
    // Plain text: the harness copies stderr into its logs, where colour
    // escape codes are noise.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .init();
    let cfg = match Config::from_vars(|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("courier-adapter: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("courier-adapter: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(on_signal(shutdown.clone()));
        courier_adapter::run(cfg, shutdown).await
    });
    // Threads still blocked (the stdin reader) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("courier-adapter: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Cancels `shutdown` at the first SIGTERM or SIGINT.
async fn on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "no SIGTERM handler; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    shutdown.cancel();
}
