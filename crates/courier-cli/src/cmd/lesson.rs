//! `courier lesson [--listen 127.0.0.1:0]`: serves the interactive lesson on
//! delivery guarantees. The page's assets (web/lesson/) are compiled into the
//! binary; the page recomputes each scene through a JSON API backed by the
//! pure simulations of `courier-sim`:
//!
//! - `GET  /api/scenes`        every scene with its model and parameters;
//! - `POST /api/sim/{scene}`   body `{"seed": 7, "params": {...}}` -> the run.
//!
//! Bad input is a 400 with `{"error": "..."}`; an unknown scene a 404.
//!
//! The page (`GET /`) carries, inside `<noscript>`, each scene's figures at
//! its defaults with seed [`NOSCRIPT_SEED`]: the table and reading that
//! `courier sim <scene> --seed 1` prints, computed once per process by
//! `courier-sim` (never typed in). `GET /docs/{file}` serves the few project
//! documents the page's "Where to go next" links to, as plain text.
//!
//! # Invariants
//! - At most [`SIMS_IN_PARALLEL_MAX`] simulations run at once, off the async
//!   workers; a request that waits longer than [`SIM_QUEUE_WAIT_MS`] gets a 503.
//! - Request bodies are capped at [`REQUEST_BYTES_MAX`]; the work of one run
//!   is capped by the scenes' parameter ranges.
//! - It is served like the dashboard (`courier_dispatch::server::serve`):
//!   a request head must arrive within the header time-out, and the
//!   connections served at once are capped.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use courier_dispatch::dashboard::asset;
use courier_dispatch::server::{bind, serve, HttpLimits};
use serde::Deserialize;
use tokio::sync::Semaphore;

const INDEX_HTML: &str = include_str!("../../../../web/lesson/index.html");
const STYLE_CSS: &str = include_str!("../../../../web/lesson/style.css");
const NOSCRIPT_CSS: &str = include_str!("../../../../web/lesson/noscript.css");
const APP_JS: &str = include_str!("../../../../web/lesson/app.js");
const CHARTS_JS: &str = include_str!("../../../../web/lesson/charts.js");
const CONTENT_JS: &str = include_str!("../../../../web/lesson/content.js");
const FAVICON_SVG: &str = include_str!("../../../../web/lesson/favicon.svg");

/// The documents the page links to, by the name in `/docs/{file}`.
const DOCS: [(&str, &str); 4] = [
    ("README.md", include_str!("../../../../README.md")),
    ("relay.md", include_str!("../../../../docs/relay.md")),
    (
        "operations.md",
        include_str!("../../../../docs/operations.md"),
    ),
    (
        "provider-api.md",
        include_str!("../../../../docs/provider-api.md"),
    ),
];

/// The lesson's Content-Security-Policy, on every file it serves.
const CSP: &str = "default-src 'self'; img-src 'self' data:; base-uri 'none'";

/// The seed of the figures shown without JavaScript (the page's default seed).
pub const NOSCRIPT_SEED: u64 = 1;

/// The page with its `<noscript>` figures, rendered on first use.
static PAGE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// Simulations running at once (the machine has two cores).
pub const SIMS_IN_PARALLEL_MAX: usize = 2;
/// How long a request may wait for a free simulation slot.
pub const SIM_QUEUE_WAIT_MS: u64 = 10_000;
/// The largest request body read.
pub const REQUEST_BYTES_MAX: usize = 16 * 1024;

#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on (loopback by default; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let listener = bind(&args.listen.to_string())
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // The first line of stdout is the address: tests and scripts read it.
    println!("courier lesson listening on http://{addr}");
    std::io::stdout().flush()?;
    if !addr.ip().is_loopback() {
        eprintln!("warning: the lesson is reachable from other machines at {addr}");
    }
    // Render the page's <noscript> figures while the first reader arrives.
    tokio::spawn(page());
    // The dashboard's HTTP path: header read time-out, connection cap,
    // graceful stop on SIGTERM or Ctrl-C.
    serve(
        listener,
        router(),
        &HttpLimits::default(),
        super::common::shutdown_on_signal(),
    )
    .await
    .context("lesson server failed")?;
    Ok(ExitCode::SUCCESS)
}

struct AppState {
    sims: Semaphore,
}

/// The lesson's routes (public so a later dashboard can mount them).
pub fn router() -> Router {
    let state = Arc::new(AppState {
        sims: Semaphore::new(SIMS_IN_PARALLEL_MAX),
    });
    Router::new()
        .route(
            "/",
            get(|| async { asset(page().await.as_str(), "text/html", Some(CSP)) }),
        )
        .route("/docs/{file}", get(doc))
        .route(
            "/style.css",
            get(|| async { asset(STYLE_CSS, "text/css", Some(CSP)) }),
        )
        .route(
            "/noscript.css",
            get(|| async { asset(NOSCRIPT_CSS, "text/css", Some(CSP)) }),
        )
        .route(
            "/app.js",
            get(|| async { asset(APP_JS, "text/javascript", Some(CSP)) }),
        )
        .route(
            "/charts.js",
            get(|| async { asset(CHARTS_JS, "text/javascript", Some(CSP)) }),
        )
        .route(
            "/content.js",
            get(|| async { asset(CONTENT_JS, "text/javascript", Some(CSP)) }),
        )
        .route(
            "/favicon.svg",
            get(|| async { asset(FAVICON_SVG, "image/svg+xml", Some(CSP)) }),
        )
        .route("/api/scenes", get(scenes))
        .route("/api/sim/{scene}", post(simulate))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such page") })
        .layer(DefaultBodyLimit::max(REQUEST_BYTES_MAX))
        .with_state(state)
}

async fn doc(Path(file): Path<String>) -> Response {
    match DOCS.iter().find(|(name, _)| *name == file) {
        Some(&(_, text)) => asset(text, "text/plain", Some(CSP)),
        None => error(StatusCode::NOT_FOUND, "no such document"),
    }
}

/// The page, with each scene's `<!-- noscript NAME -->` marker replaced by
/// its figures at the defaults.
async fn page() -> &'static String {
    PAGE.get_or_init(|| async {
        tokio::task::spawn_blocking(render_page)
            .await
            // A simulation that panicked leaves the page without its
            // <noscript> figures rather than without a page.
            .unwrap_or_else(|_| INDEX_HTML.to_string())
    })
    .await
}

fn render_page() -> String {
    let mut page = INDEX_HTML.to_string();
    for scene in courier_sim::Scene::ALL {
        let marker = format!("<!-- noscript {} -->", scene.name());
        let body = match courier_sim::run(scene, &serde_json::Value::Null, NOSCRIPT_SEED) {
            Ok(run) => format!(
                "<h2>{}</h2><p>At the defaults, seed {NOSCRIPT_SEED} (<code>courier sim {} --seed {NOSCRIPT_SEED}</code>):</p>\
                 <pre>{}</pre><p class=\"noscript-reading\">{}</p>",
                html_escape(scene.title()),
                scene.name(),
                html_escape(&run.table),
                html_escape(&run.reading),
            ),
            Err(e) => format!("<p>This scene could not be computed: {}</p>", html_escape(&e.to_string())),
        };
        page = page.replace(
            &marker,
            &format!(
                "<noscript><div class=\"noscript-scene\" data-scene=\"{}\">{body}</div></noscript>",
                scene.name()
            ),
        );
    }
    page
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode: {e}"),
        ),
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response_raw(status, serde_json::json!({ "error": message }))
}

fn json_response_raw(status: StatusCode, value: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn scenes() -> Response {
    json_response(StatusCode::OK, &courier_sim::catalog())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SimRequest {
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default)]
    params: serde_json::Value,
}

fn default_seed() -> u64 {
    1
}

async fn simulate(
    State(state): State<Arc<AppState>>,
    Path(scene): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let scene = match courier_sim::Scene::from_name(&scene) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::NOT_FOUND, &e.to_string()),
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return error(e.status(), &e.body_text()),
    };
    let request: SimRequest = if body.iter().all(u8::is_ascii_whitespace) {
        SimRequest {
            seed: default_seed(),
            params: serde_json::Value::Null,
        }
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("the body must be {{\"seed\": <u64>, \"params\": {{...}}}}: {e}"),
                )
            }
        }
    };
    let permit = match tokio::time::timeout(
        Duration::from_millis(SIM_QUEUE_WAIT_MS),
        state.sims.acquire(),
    )
    .await
    {
        Ok(Ok(p)) => p,
        _ => return error(StatusCode::SERVICE_UNAVAILABLE, "busy: try again shortly"),
    };
    let result =
        tokio::task::spawn_blocking(move || courier_sim::run(scene, &request.params, request.seed))
            .await;
    drop(permit);
    match result {
        Ok(Ok(run)) => json_response(StatusCode::OK, &run),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the simulation failed: {e}"),
        ),
    }
}
