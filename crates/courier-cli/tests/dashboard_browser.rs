//! The dashboard in a real headless Chromium during a live run: the built
//! `courier` binary runs `provider` (faults on, with latency), `serve` (with an
//! API token) and a `worker` as child processes against a fresh database;
//! actions are enqueued through the API across stores, one of them noisy.
//! The page, given the token, must show the backlog, then the chart and the
//! store table moving as the worker drains it, and finally every action
//! final. Also checks both `/metrics` endpoints and the `/report` page with
//! the verifier's real report of the run. Screenshots go to
//! `target/tmp/dashboard-*.png` (not committed).
//!
//! The Action panel, against a server alone (no worker, so actions stay
//! where the test puts them): a scheduled action looked up and cancelled
//! through its button once the confirmation is accepted, a refusal's
//! sentence shown, a 400 re-driven and linked both ways; and a dismissed
//! confirmation that changes nothing.
//!
//! The Held unknown panel, against a server alone: an action held
//! `unknown` (as a worker of a provider without a lookup holds it) is in
//! the snapshot's list and on the panel, whose buttons name it (audited by
//! axe-core); resolved as not sent once the confirmation is accepted, it
//! is `failed` in the database, the panel shows none held, and its link
//! leads to the Action panel, where it can be re-driven.

#[path = "support/browser.rs"]
mod browser;
#[path = "hostile/live.rs"]
mod live;

use browser::Browser;
use courier_core::ActionState;
use live::{db_state, fresh_db, Service};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const TOKEN: &str = "dash-token";
const SECRET: &str = "dash-secret";
const API_KEY: &str = "dash-key";
const NOISY: usize = 120;
const QUIET_STORES: usize = 12;
const QUIET_EACH: usize = 10;
const TOTAL: usize = NOISY + QUIET_STORES * QUIET_EACH;
/// How long the worker may take to make every action final.
const DRAIN_TIMEOUT_MS: u64 = 60_000;

/// Reads a figure the page shows.
fn page(b: &Browser, script: &str) -> Value {
    b.execute(script, vec![])
}

fn latest_point(b: &Browser) -> Option<Value> {
    let v = page(
        b,
        "return document.getElementById('chart').dataset.latest || '';",
    );
    serde_json::from_str(v.as_str()?).ok()
}

fn store_rows(b: &Browser) -> Vec<(String, i64, i64)> {
    let v = page(
        b,
        "return [...document.querySelectorAll('#stores tbody tr[data-store]')]\
           .map(r => [r.dataset.store, Number(r.dataset.pending), Number(r.dataset.inFlight)]);",
    );
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_string(),
                r[1].as_i64().unwrap(),
                r[2].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_a_live_run() {
    let (url, store) = fresh_db("dash").await;
    let run_dir = tempfile::tempdir().unwrap();
    let log = run_dir.path().join("provider.jsonl");
    let (provider, mut server) = start_provider_and_server(&url, &log);
    let api = server.url.clone();
    let http = reqwest::Client::new();
    enqueue_backlog(&http, &api).await;

    let b = Browser::launch(1280, 900);
    let points_before = token_then_backlog(&b, &api);
    // A worker drains it.
    let worker = start_worker(&url, &provider.url, &api);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let seen_in_flight = the_table_moves(&b, &dir);
    sorting_by_name(&b);
    every_action_final_on_the_chart(&b, points_before, &dir);
    the_database_node(&b);
    the_metrics_of_both_processes(&http, &api, &worker).await;
    the_verifiers_report_in_report(&b, &api, &url, &log, run_dir.path(), &dir);
    server.assert_running();
    drop(store);
    eprintln!(
        "screenshots: {}/dashboard-{{mid-run,done,report}}.png (in flight seen in the table: {seen_in_flight})",
        dir.display()
    );
}

/// The provider (faults on, with latency) and the server (with the token).
fn start_provider_and_server(url: &str, log: &std::path::Path) -> (Service, Service) {
    let provider = Service::start(
        "provider",
        &[
            "provider",
            "--listen",
            "127.0.0.1:0",
            "--log",
            log.to_str().unwrap(),
            "--api-key",
            API_KEY,
            "--webhook-secret",
            SECRET,
            "--seed",
            "3",
            "--latency-ms",
            "uniform:60..200",
            "--timeout-hold-ms",
            "600",
        ],
        true,
    );
    let server = Service::start(
        "serve",
        &[
            "serve",
            "--database-url",
            url,
            "--listen",
            "127.0.0.1:0",
            "--webhook-secret",
            SECRET,
            "--api-token",
            TOKEN,
            "--sample-interval-ms",
            "500",
        ],
        true,
    );
    (provider, server)
}

/// The backlog: one noisy store and twelve quiet ones.
async fn enqueue_backlog(http: &reqwest::Client, api: &str) {
    let mut n = 0;
    for (s, count) in std::iter::once(("noisy".to_string(), NOISY))
        .chain((0..QUIET_STORES).map(|i| (format!("quiet-{i:02}"), QUIET_EACH)))
    {
        for _ in 0..count {
            n += 1;
            let r = http
                .post(format!("{api}/v1/actions"))
                .bearer_auth(TOKEN)
                .json(&json!({"store": s, "to": format!("+1555{n:07}"), "body": format!("hello {n}")}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 201);
        }
    }
}

/// Without the token the page asks for it; given it, it shows the whole
/// backlog, the noisy store on top. Returns the chart's points so far.
fn token_then_backlog(b: &Browser, api: &str) -> i64 {
    b.goto(&format!("{api}/dashboard"));
    // Without the token the page asks for it.
    b.wait_for("the page to ask for the token", 15_000, |b| {
        let s = page(b, "return document.getElementById('status').textContent;");
        s.as_str()?.contains("API token").then_some(())
    });
    let field = b.find("#token");
    b.send_keys(&field, TOKEN);
    b.click(&b.find("#token-form button"));

    // The whole backlog, the noisy store on top.
    b.wait_for("the backlog on the chart", 20_000, |b| {
        let p = latest_point(b)?;
        (p["pending"].as_i64()? == TOTAL as i64).then_some(())
    });
    let rows = store_rows(b);
    assert_eq!(rows.len(), QUIET_STORES + 1, "{rows:?}");
    assert_eq!(rows[0], ("noisy".to_string(), NOISY as i64, 0), "{rows:?}");
    page(
        b,
        "return Number(document.getElementById('chart').dataset.points);",
    )
    .as_i64()
    .unwrap()
}

fn start_worker(url: &str, provider_url: &str, api: &str) -> Service {
    Service::start(
        "worker",
        &[
            "worker",
            "--database-url",
            url,
            "--provider-url",
            provider_url,
            "--provider-api-key",
            API_KEY,
            "--callback-url",
            &format!("{api}/v1/webhooks/provider"),
            "--concurrency",
            "8",
            "--seed",
            "5",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        false,
    )
}

/// The table moves: the noisy store's backlog shrinks while it has work in
/// flight, and the workers table names the worker. Returns whether work in
/// flight was seen in the store table.
fn the_table_moves(b: &Browser, dir: &std::path::Path) -> bool {
    let (seen_in_flight, mid) = b.wait_for("the noisy store's backlog to shrink", 30_000, |b| {
        let rows = store_rows(b);
        let noisy = rows.iter().find(|r| r.0 == "noisy")?;
        (noisy.1 < NOISY as i64).then(|| (rows.iter().any(|r| r.2 > 0), rows))
    });
    eprintln!(
        "mid-run store table (top 3): {:?}",
        &mid[..3.min(mid.len())]
    );
    // The workers table names the worker while it holds leases.
    let owners = b.wait_for("the worker in the leases table", 30_000, |b| {
        let v = page(
            b,
            "return [...document.querySelectorAll('#workers tbody tr[data-owner]')].map(r => r.dataset.owner);",
        );
        let v = v.as_array()?.clone();
        (!v.is_empty()).then_some(v)
    });
    assert!(
        owners[0].as_str().unwrap().contains(':'),
        "owner is host:pid:suffix: {owners:?}"
    );
    b.execute(
        "document.getElementById('h-states').scrollIntoView();",
        vec![],
    );
    let shot = b.screenshot_full_page();
    std::fs::write(dir.join("dashboard-mid-run.png"), &shot).unwrap();
    seen_in_flight
}

/// Every action final, on the chart, with every line drawn.
fn every_action_final_on_the_chart(b: &Browser, points_before: i64, dir: &std::path::Path) {
    let started = Instant::now();
    let last = b.wait_for(
        "every action to be final on the chart",
        DRAIN_TIMEOUT_MS,
        |b| {
            let p = latest_point(b)?;
            (p["done"].as_i64()? + p["failed"].as_i64()? == TOTAL as i64).then_some(p)
        },
    );
    eprintln!(
        "drained in about {:?} after mid-run; last point {last}",
        started.elapsed()
    );
    let points_after = page(
        b,
        "return Number(document.getElementById('chart').dataset.points);",
    )
    .as_i64()
    .unwrap();
    assert!(
        points_after >= points_before + 3,
        "the chart gained points: {points_before} -> {points_after}"
    );
    // Every line of the chart is drawn, with one vertex per point.
    let vertices = page(
        b,
        "return [...document.querySelectorAll('#state-chart polyline')]\
           .map(p => p.getAttribute('points').trim().split(' ').length);",
    );
    assert_eq!(
        vertices,
        json!(vec![points_after; ActionState::ALL.len()]),
        "a line per state, one vertex per sample"
    );
    // Only stores with work are listed: none is left.
    b.wait_for("the store table to empty", 10_000, |b| {
        store_rows(b).is_empty().then_some(())
    });
    std::fs::write(dir.join("dashboard-done.png"), b.screenshot_full_page()).unwrap();
}

/// Sorting by name orders the listed stores (those with work, mid-run) by
/// name; sorting again reverses them.
fn sorting_by_name(b: &Browser) {
    let names = |b: &Browser| store_rows(b).into_iter().map(|r| r.0).collect::<Vec<_>>();
    b.click(&b.find("#stores th[data-key=\"store\"] button"));
    let asc = b.wait_for("the stores sorted by name", 10_000, |b| {
        let n = names(b);
        (n.len() >= 2 && n.windows(2).all(|w| w[0] <= w[1])).then_some(n)
    });
    b.click(&b.find("#stores th[data-key=\"store\"] button"));
    let desc = b.wait_for("the stores sorted by name, reversed", 10_000, |b| {
        let n = names(b);
        (n.len() >= 2 && n.windows(2).all(|w| w[0] >= w[1])).then_some(n)
    });
    eprintln!("sorted by name: {asc:?}, then {desc:?}");
    let sort = page(b, "return document.querySelector('#stores th[data-key=\"store\"]').getAttribute('aria-sort');");
    assert_eq!(sort, "descending");
}

/// The node the server writes to, primary, and no standby table (the test
/// cluster has no standby).
fn the_database_node(b: &Browser) {
    let note = page(
        b,
        "return document.getElementById('replication-note').textContent;",
    );
    let note = note.as_str().unwrap_or_default();
    assert!(
        note.starts_with("127.0.0.1:") && note.contains(": primary"),
        "{note}"
    );
    assert!(note.contains("no standby"), "{note}");
    let hidden = page(
        b,
        "return document.getElementById('replication-wrap').hidden;",
    );
    assert_eq!(hidden, Value::Bool(true));
}

/// The metrics of both processes: the worker's open, the server's behind the token.
async fn the_metrics_of_both_processes(http: &reqwest::Client, api: &str, worker: &Service) {
    let worker_metrics = worker_metrics_url(worker);
    let text = http
        .get(&worker_metrics)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "courier_claims_total",
        "courier_settled_total",
        "courier_claim_duration_seconds_bucket",
        "courier_sends_total{answer=\"accepted\"}",
    ] {
        assert!(text.contains(name), "worker /metrics lacks {name}:\n{text}");
    }
    let r = http.get(format!("{api}/metrics")).send().await.unwrap();
    assert_eq!(
        r.status().as_u16(),
        401,
        "the server's /metrics needs the token"
    );
    let text = server_metrics_after_every_settle(http, api).await;
    for name in [
        "courier_actions{state=\"pending\"} 0",
        "courier_store_pending{store=\"noisy\"}",
        "courier_enqueued_total{created=\"true\"}",
        "courier_webhooks_total",
        "courier_enqueue_to_accepted_seconds_bucket",
    ] {
        assert!(text.contains(name), "server /metrics lacks {name}:\n{text}");
    }
    eprintln!("--- server /metrics (excerpt) ---");
    for line in text.lines().filter(|l| !l.starts_with('#')).filter(|l| {
        l.starts_with("courier_actions")
            || l.starts_with("courier_webhooks_total")
            || l.starts_with("courier_enqueue_to_accepted_seconds_count")
            || l.starts_with("courier_enqueue_to_accepted_seconds_sum")
            || l.starts_with("courier_events")
            || l.starts_with("courier_store_pending{store=\"noisy\"}")
    }) {
        eprintln!("{line}");
    }
}

/// The server's metrics once every accepted action reached the histogram
/// (a settle lag after it happened).
async fn server_metrics_after_every_settle(http: &reqwest::Client, api: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = http
            .get(format!("{api}/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let count = text
            .lines()
            .find_map(|l| l.strip_prefix("courier_enqueue_to_accepted_seconds_count "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if count >= TOTAL as f64 || Instant::now() > deadline {
            assert!(
                count >= TOTAL as f64,
                "accepted latencies observed: {count} of {TOTAL}"
            );
            break text;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The verifier's report of this run, opened in /report.
fn the_verifiers_report_in_report(
    b: &Browser,
    api: &str,
    url: &str,
    log: &std::path::Path,
    run_dir: &std::path::Path,
    dir: &std::path::Path,
) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .args([
            "verify",
            "--provider-log",
            log.to_str().unwrap(),
            "--database-url",
            url,
            "--json",
        ])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).expect("verify --json prints JSON");
    assert_eq!(report["passed"], true, "{report}");
    let report_path = run_dir.join("verify.json");
    std::fs::write(&report_path, &out.stdout).unwrap();
    b.goto(&format!("{api}/report"));
    let input = b.find("#report-file");
    b.send_keys(&input, report_path.to_str().unwrap());
    let verdict = b.wait_for("the report to render", 10_000, |b| {
        let v = page(
            b,
            "const v = document.getElementById('verdict'); return v ? v.textContent : null;",
        );
        v.as_str().map(str::to_string)
    });
    assert_eq!(verdict, "PASSED");
    let shown = page(
        b,
        "return [...document.querySelectorAll('#report .kv th')].map(t => t.textContent);",
    );
    assert!(
        shown.as_array().unwrap().iter().any(|t| t == "exactly one"),
        "the report shows its figures: {shown}"
    );
    std::fs::write(dir.join("dashboard-report.png"), b.screenshot_full_page()).unwrap();
    let errors = page(b, "return window.__dashboardErrors || [];");
    assert_eq!(errors, json!([]));
}

/// The worker prints `courier worker metrics on http://ADDR/metrics` on stderr.
fn worker_metrics_url(worker: &Service) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match worker.stderr.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if let Some(i) = line.find("metrics on ") {
                    return line[i + "metrics on ".len()..].trim().to_string();
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("the worker's stderr ended: {e}"),
        }
    }
    panic!("the worker did not say where its metrics are");
}

/// A server alone on a fresh database (no provider, no worker).
async fn server_alone(tag: &str) -> (Service, courier_store::PgStore) {
    let (url, store) = fresh_db(tag).await;
    let server = Service::start(
        "serve",
        &[
            "serve",
            "--database-url",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--webhook-secret",
            SECRET,
            "--api-token",
            TOKEN,
        ],
        true,
    );
    (server, store)
}

/// Enqueues through the API; returns the action's id.
async fn enqueue(http: &reqwest::Client, api: &str, action: Value) -> i64 {
    let r = http
        .post(format!("{api}/v1/actions"))
        .bearer_auth(TOKEN)
        .json(&action)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    r.json::<Value>().await.unwrap()["id"].as_i64().unwrap()
}

/// The action's state as the API tells it.
async fn api_state(http: &reqwest::Client, api: &str, id: i64) -> String {
    let v: Value = http
        .get(format!("{api}/v1/actions/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["state"].as_str().unwrap().to_string()
}

/// Opens the dashboard and gives it the token.
fn open_with_token(b: &Browser, api: &str) {
    b.goto(&format!("{api}/dashboard"));
    b.send_keys(&b.find("#token"), TOKEN);
    b.click(&b.find("#token-form button"));
}

/// Types action `id` into the panel and looks it up, until the panel shows
/// it in `state`.
fn look_up(b: &Browser, id: i64, state: &str) {
    let field = b.find("#action-id");
    b.execute("arguments[0].value = '';", vec![field.to_json()]);
    b.send_keys(&field, &id.to_string());
    b.click(&b.find("#action-form button"));
    wait_shown(b, id, state);
}

fn wait_shown(b: &Browser, id: i64, state: &str) {
    b.wait_for(&format!("action {id} shown {state}"), 10_000, |b| {
        let v = page(
            b,
            "const v = document.getElementById('action-view');\
             return v.hidden ? null : [v.dataset.id, v.dataset.state];",
        );
        (v == json!([id.to_string(), state])).then_some(())
    });
}

/// Whether each button is enabled: [cancel, re-drive].
fn buttons_enabled(b: &Browser) -> Value {
    page(
        b,
        "return ['action-cancel', 'action-redrive'].map(i => !document.getElementById(i).disabled);",
    )
}

/// The panel's answer once it is no longer a "…ing" one: [state, code, text].
fn answer(b: &Browser) -> Value {
    b.wait_for("the panel's answer", 10_000, |b| {
        let v = page(
            b,
            "const a = document.getElementById('action-answer');\
             return a.dataset.state === 'wait' ? null : [a.dataset.state, a.dataset.code || '', a.textContent];",
        );
        (!v.is_null()).then_some(v)
    })
}

fn confirm_shown(b: &Browser) -> Value {
    page(
        b,
        "const c = document.getElementById('action-confirm');\
         return c.hidden ? null : [c.dataset.op, document.getElementById('action-confirm-text').textContent];",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_action_panel_cancels_and_redrives_once_the_confirmation_is_accepted() {
    let (server, store) = server_alone("dash_cancel").await;
    let api = server.url.clone();
    let http = reqwest::Client::new();
    let refused_400 = refused_with_400(&http, &api, &store).await;
    let later = |s: i64| (chrono::Utc::now() + chrono::Duration::seconds(s)).to_rfc3339();
    let scheduled = enqueue(
        &http,
        &api,
        json!({"store": "s1", "to": "+15550000001", "body": "later",
               "not_before": later(3_600), "expires_at": later(7_200)}),
    )
    .await;
    let pending = enqueue(
        &http,
        &api,
        json!({"store": "s1", "to": "+15550000002", "body": "now"}),
    )
    .await;

    let b = Browser::launch(1200, 900);
    open_with_token(&b, &api);
    look_up(&b, scheduled, "scheduled");
    let fields = page(
        &b,
        "return Object.fromEntries([...document.querySelectorAll('#action-fields tr')]\
           .map(r => [r.cells[0].textContent, r.cells[1].textContent]));",
    );
    assert_eq!(fields["Store"], "s1", "{fields}");
    for f in ["Not before", "Expires"] {
        assert!(
            fields[f].as_str().unwrap().contains(" UTC (in "),
            "{fields}"
        );
    }
    assert_eq!(buttons_enabled(&b), json!([true, false]));

    b.click(&b.find("#action-cancel"));
    let asked = confirm_shown(&b);
    assert_eq!(asked[0], "cancel", "{asked}");
    assert!(
        asked[1]
            .as_str()
            .unwrap()
            .contains(&format!("Cancel action {scheduled}")),
        "{asked}"
    );
    b.click(&b.find("#action-confirm-yes"));
    wait_shown(&b, scheduled, "cancelled");
    assert_eq!(answer(&b)[1], "cancelled");
    assert_eq!(buttons_enabled(&b), json!([false, false]));
    assert_eq!(api_state(&http, &api, scheduled).await, "cancelled");

    // Cancelled by someone else after the page read it: the API's 409 and
    // its sentence, and the panel shows the state it has now.
    look_up(&b, pending, "pending");
    let r = http
        .post(format!("{api}/v1/actions/{pending}/cancel"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    b.click(&b.find("#action-cancel"));
    b.click(&b.find("#action-confirm-yes"));
    let conflict = answer(&b);
    assert_eq!(conflict[0], "error", "{conflict}");
    assert_eq!(conflict[1], "final", "{conflict}");
    assert!(
        conflict[2]
            .as_str()
            .unwrap()
            .contains("cannot be cancelled: it has ended"),
        "{conflict}"
    );
    wait_shown(&b, pending, "cancelled");

    // A 400: re-driven as a new action, linked both ways on the panel.
    look_up(&b, refused_400, "failed");
    assert_eq!(buttons_enabled(&b), json!([false, true]));
    b.click(&b.find("#action-redrive"));
    assert_eq!(confirm_shown(&b)[0], "redrive");
    b.click(&b.find("#action-confirm-yes"));
    let redriven = answer(&b);
    assert_eq!(redriven[1], "redriven", "{redriven}");
    let link = b.wait_for("the link to the re-drive", 10_000, |b| {
        let v = page(b, "const l = document.querySelector('#action-fields [data-goto]'); return l ? l.dataset.goto : null;");
        v.as_str().map(str::to_string)
    });
    let new: i64 = link.parse().unwrap();
    assert!(
        redriven[2]
            .as_str()
            .unwrap()
            .contains(&format!("re-driven as action {new}")),
        "{redriven}"
    );
    b.click(&b.find("#action-fields [data-goto]"));
    wait_shown(&b, new, "pending");
    let back = page(
        &b,
        "return document.querySelector('#action-fields [data-goto]').dataset.goto;",
    );
    assert_eq!(
        back,
        json!(refused_400.to_string()),
        "the new action links back"
    );
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("dashboard-action.png"), b.screenshot_full_page()).unwrap();
    assert_eq!(page(&b, "return window.__dashboardErrors;"), json!([]));
}

/// An action the provider refused with a 400: enqueued through the API,
/// claimed and failed through the store, as a worker would.
async fn refused_with_400(
    http: &reqwest::Client,
    api: &str,
    store: &courier_store::PgStore,
) -> i64 {
    let lease = claimed_to_send(
        http,
        api,
        store,
        json!({"store": "s1", "to": "+15550000009", "body": "bad"}),
    )
    .await;
    store
        .action_fail(&lease, 400, "provider answered 400: bad number")
        .await
        .unwrap()
        .unwrap();
    lease.action_id
}

/// Enqueues `action` through the API (no other action may be pending) and
/// claims it through the store to send, as a worker would (intent written,
/// first attempt counted); returns its lease.
async fn claimed_to_send(
    http: &reqwest::Client,
    api: &str,
    store: &courier_store::PgStore,
    action: Value,
) -> courier_store::Lease {
    let id = enqueue(http, api, action).await;
    let owner: std::sync::Arc<str> = std::sync::Arc::from("w1");
    let got = courier_testkit::fixtures::claim_to_send(
        store,
        &owner,
        1,
        60_000,
        1_000,
        courier_store::ClaimMode::Fair,
    )
    .await
    .unwrap();
    assert_eq!(got[0].lease.action_id, id);
    got[0].lease.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_action_panel_changes_nothing_when_the_confirmation_is_dismissed() {
    let (server, store) = server_alone("dash_keep").await;
    let api = server.url.clone();
    let http = reqwest::Client::new();
    let id = enqueue(
        &http,
        &api,
        json!({"store": "s1", "to": "+15550000003", "body": "keep"}),
    )
    .await;
    let before = db_state(&store).await;

    let b = Browser::launch(1200, 900);
    open_with_token(&b, &api);
    look_up(&b, id, "pending");
    b.click(&b.find("#action-cancel"));
    assert_eq!(confirm_shown(&b)[0], "cancel");
    b.click(&b.find("#action-confirm-no"));
    assert_eq!(confirm_shown(&b), Value::Null, "the confirmation is gone");
    assert_eq!(answer(&b)[1], "dismissed");
    // Looked up again, it is as it was; so is every table.
    b.click(&b.find("#action-form button"));
    wait_shown(&b, id, "pending");
    assert_eq!(buttons_enabled(&b), json!([true, false]));
    assert_eq!(db_state(&store).await, before);
    assert_eq!(page(&b, "return window.__dashboardErrors;"), json!([]));
}

/// An action held `unknown`: enqueued through the API, claimed and held
/// through the store (`action_hold`, as a worker of a provider without a
/// lookup holds one after an attempt whose outcome it cannot learn).
async fn held_unknown(http: &reqwest::Client, api: &str, store: &courier_store::PgStore) -> i64 {
    let lease = claimed_to_send(
        http,
        api,
        store,
        json!({"store": "s1", "to": "+15550000007", "body": "maybe"}),
    )
    .await;
    store
        .action_hold(&lease, "no_lookup")
        .await
        .unwrap()
        .unwrap();
    lease.action_id
}

/// The dashboard's snapshot once its held list has `id`.
async fn snapshot_holding(http: &reqwest::Client, api: &str, id: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v: Value = http
            .get(format!("{api}/v1/ops/snapshot"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let listed = v["held_unknown"]
            .as_array()
            .is_some_and(|l| l.iter().any(|a| a["id"] == id));
        if listed || Instant::now() > deadline {
            assert!(listed, "the snapshot never listed action {id}: {v}");
            break v;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The Held unknown panel's rows: [id, store, attempts, reason, the
/// buttons' accessible names].
fn held_rows(b: &Browser) -> Value {
    page(
        b,
        "return [...document.querySelectorAll('#held tbody tr[data-id]')].map(r => [Number(r.dataset.id),\
           r.cells[1].textContent, r.cells[3].textContent, r.cells[4].textContent,\
           [...r.querySelectorAll('button')].map(b => b.getAttribute('aria-label'))]);",
    )
}

/// The panel's answer once it is no longer a "…ing" one: [state, code, text].
fn held_answer(b: &Browser) -> Value {
    b.wait_for("the held panel's answer", 10_000, |b| {
        let v = page(
            b,
            "const a = document.getElementById('held-answer');\
             return !a.dataset.state || a.dataset.state === 'wait' ? null\
               : [a.dataset.state, a.dataset.code || '', a.textContent];",
        );
        (!v.is_null()).then_some(v)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_held_unknown_panel_resolves_an_action_as_not_sent() {
    let (server, store) = server_alone("dash_held").await;
    let api = server.url.clone();
    let http = reqwest::Client::new();
    let id = held_unknown(&http, &api, &store).await;

    // The snapshot carries the list, and the count by state has it.
    let snap = snapshot_holding(&http, &api, id).await;
    assert_eq!(snap["held_unknown_max"], 50, "{snap}");
    let listed = snap["held_unknown"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{snap}");
    let row = &listed[0];
    assert_eq!(
        (&row["store"], &row["reason"], &row["attempts"]),
        (&json!("s1"), &json!("no_lookup"), &json!(1)),
        "{row}"
    );
    assert!(
        chrono::DateTime::parse_from_rfc3339(row["held_at"].as_str().unwrap()).is_ok(),
        "{row}"
    );
    assert!(row["idempotency_key"].is_string(), "{row}");

    let axe = axe_source();
    let b = Browser::launch(1200, 900);
    open_with_token(&b, &api);
    let rows = b.wait_for("the held action on the panel", 15_000, |b| {
        let v = held_rows(b);
        (v.as_array()?.len() == 1).then_some(v)
    });
    assert_eq!(
        rows,
        json!([[
            id,
            "s1",
            "1",
            "no_lookup",
            [
                format!("Resolve: sent, action {id}"),
                format!("Resolve: not sent, action {id}")
            ]
        ]])
    );
    let figures = page(
        &b,
        "return [document.getElementById('held-panel').dataset.count,\
           document.querySelector('#cards [data-state=\"unknown\"]').dataset.value];",
    );
    assert_eq!(figures, json!(["1", "1"]), "the panel's count and the card");
    let serious = axe_serious(&b, &axe);
    assert!(
        serious.is_empty(),
        "axe-core found serious or critical violations: {}",
        serde_json::to_string_pretty(&serious).unwrap()
    );

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("dashboard-held.png"), b.screenshot_full_page()).unwrap();

    // Resolved as not sent, once the confirmation is accepted.
    b.click(&b.find(&format!(
        "#held tr[data-id=\"{id}\"] button[data-resolve=\"not_sent\"]"
    )));
    let asked = page(
        &b,
        "const c = document.getElementById('held-confirm');\
         return c.hidden ? null : [c.dataset.op, document.getElementById('held-confirm-text').textContent];",
    );
    assert_eq!(asked[0], "not_sent", "{asked}");
    assert!(
        asked[1]
            .as_str()
            .unwrap()
            .contains(&format!("Resolve action {id} (store s1) as not sent?")),
        "{asked}"
    );
    b.click(&b.find("#held-confirm-yes"));
    let resolved = held_answer(&b);
    assert_eq!(resolved[0], "ok", "{resolved}");
    assert_eq!(resolved[1], "resolved", "{resolved}");
    assert!(
        resolved[2]
            .as_str()
            .unwrap()
            .contains(&format!("Action {id} resolved as not sent: it is failed.")),
        "{resolved}"
    );
    let now = store.action_get(id).await.unwrap().unwrap();
    assert_eq!(now.state, ActionState::Failed, "{now:?}");

    // The next read no longer has it: none held.
    b.wait_for("the panel to show none held", 15_000, |b| {
        let v = page(
            b,
            "const e = document.querySelector('#held tbody td.empty');\
             return [e ? e.textContent : null, document.getElementById('held-panel').dataset.count];",
        );
        (v == json!(["none held", "0"])).then_some(())
    });
    let v: Value = http
        .get(format!("{api}/v1/ops/snapshot"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["held_unknown"], json!([]), "{v}");

    // The answer's link opens it in the Action panel, where it can be re-driven.
    b.click(&b.find("#held-answer [data-goto]"));
    wait_shown(&b, id, "failed");
    assert_eq!(buttons_enabled(&b), json!([false, true]));
    assert_eq!(page(&b, "return window.__dashboardErrors;"), json!([]));
}

/// The path of axe-core's browser build (as `lesson_browser.rs` finds it);
/// panics (the test fails) when it is missing.
fn axe_source() -> String {
    let path = std::env::var_os("AXE_CORE_JS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../web/test/node_modules/axe-core/axe.min.js")
        });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core is missing at {} ({e}): run scripts/install-web-deps.sh, or set $AXE_CORE_JS",
            path.display()
        )
    })
}

/// Runs axe-core on the page; returns the serious and critical violations
/// (and checks that the audit really ran its rules).
fn axe_serious(b: &Browser, axe: &str) -> Vec<Value> {
    b.execute(axe, vec![]);
    b.set_script_timeout(120_000);
    let v = b.execute_async(
        "const done = arguments[arguments.length - 1];\
         axe.run(document, { resultTypes: ['violations'] })\
           .then(r => done({ passes: r.passes.length, serious: r.violations\
             .filter(v => v.impact === 'serious' || v.impact === 'critical')\
             .map(v => ({ id: v.id, impact: v.impact, help: v.help,\
                          nodes: v.nodes.slice(0, 5).map(n => [n.target.join(' '), n.failureSummary]) })) }))\
           .catch(e => done({ error: String(e) }));",
        vec![],
    );
    assert!(v["error"].is_null(), "axe-core failed: {v}");
    assert!(
        v["passes"].as_u64().is_some_and(|n| n >= 20),
        "axe-core ran too few rules: {v}"
    );
    v["serious"]
        .as_array()
        .cloned()
        .expect("axe-core's violations")
}
