//! The operator's pages of `courier serve`, and [`app`], the whole router of
//! `courier serve`: the API, `/openapi.json`, `/metrics`, the dashboard.
//!
//! - `GET /` and `GET /dashboard`: the live dashboard (assets from
//!   `web/dashboard/`, compiled in; no CDN): actions by state (every
//!   `ActionState`) over the last minutes, one action looked up by id with
//!   its Cancel and Re-drive buttons, the actions held `unknown` with
//!   their Resolve buttons, stores by backlog and in-flight, the stores'
//!   flow-control settings and one provider gate looked up by name
//!   (`GET /v1/providers/{name}`), workers with their leases, the oldest
//!   open intents against the key retention, the latest fenced writes and
//!   backward reports.
//! - `GET /v1/ops/snapshot`: the data behind it, as JSON: the sampler's latest
//!   sample (see [`crate::metrics::Sampler`]) and its history, and the
//!   latest reads of the held list ([`HeldList`]) and of the configured
//!   stores ([`SettingsList`]).
//! - `GET /report`: opens a JSON report chosen by the user (chaos, bench,
//!   verify) in the browser; [`render_report_html`] writes the same view as
//!   one self-contained HTML file.
//!
//! # Invariants
//! - Read-only: nothing here writes to the database; the snapshot is read in
//!   a read-only transaction by the sampler, and the held list and the
//!   configured stores each by a loop of their own on the same interval,
//!   never per request. The page's Cancel,
//!   Re-drive and Resolve buttons (each after an in-page confirmation) call
//!   the API's routes, `POST /v1/actions/{id}/cancel`, `/redrive` and
//!   `/resolve` (`crate::server`), with the page's token: the API authorizes
//!   them and records who asked, as for any other caller.
//! - Unless the API is open, the data (`/v1/ops/snapshot`, `/metrics`) needs
//!   an admin token (a store token gets 403); the static pages hold no data
//!   and do not.
//! - Text from the database reaches the page through `textContent` only, and
//!   the pages are served with a `Content-Security-Policy` of `'self'`.

use crate::auth::Auth;
use crate::metrics::{recorder, HistoryPoint, MetricsError, Sampler, SamplerConfig};
use crate::server::{router_with_auth as api_router, ServerConfig};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use courier_store::{HeldUnknown, OpsSnapshot, PgStore, StoreError, StoreFlow};
use serde::Serialize;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const INDEX_HTML: &str = include_str!("../../../web/dashboard/index.html");
const APP_JS: &str = include_str!("../../../web/dashboard/app.js");
const STYLE_CSS: &str = include_str!("../../../web/dashboard/style.css");
const REPORT_HTML: &str = include_str!("../../../web/dashboard/report.html");
const REPORT_JS: &str = include_str!("../../../web/dashboard/report.js");
const FAVICON_SVG: &str = include_str!("../../../web/dashboard/favicon.svg");

const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                   script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Actions held `unknown` the dashboard lists, newest hold first; their
/// count is the maintained one (`by_state` of the snapshot).
pub const HELD_LISTED_MAX: i64 = 50;
/// Configured stores the dashboard lists, by name.
pub const SETTINGS_LISTED_MAX: i64 = 50;

/// Everything `courier serve` answers: the API (with its body limit and
/// request time-out), `/openapi.json`, `/metrics` and the dashboard. It
/// installs the process's metrics recorder and starts the database sampler
/// and the held list's loop, which run until `shutdown`.
pub fn app(
    store: PgStore,
    cfg: ServerConfig,
    auth: Auth,
    sampler_cfg: SamplerConfig,
    shutdown: CancellationToken,
) -> Result<Router, MetricsError> {
    let handle = recorder()?;
    let every = Duration::from_millis(sampler_cfg.interval_ms);
    let sampler = Sampler::start(store.clone(), sampler_cfg, shutdown.clone())?;
    let held = {
        let store = store.clone();
        Polled::start("the held list", every, shutdown.clone(), move || {
            let store = store.clone();
            async move { store.actions_unknown(HELD_LISTED_MAX, None).await }
        })
    };
    let settings = {
        let store = store.clone();
        Polled::start("the store settings", every, shutdown, move || {
            let store = store.clone();
            async move { store.stores_configured(SETTINGS_LISTED_MAX).await }
        })
    };
    Ok(api_router(store, cfg, auth.clone())
        .merge(crate::openapi::router())
        .merge(crate::metrics::router(handle, auth.clone()))
        .merge(router(sampler, held, settings, auth)))
}

/// The operators' list of actions held `unknown`
/// ([`PgStore::actions_unknown`], at most [`HELD_LISTED_MAX`]). It is not a
/// gauge, so it lives here rather than in the metrics' [`Sampler`]; its
/// figure (actions `unknown`) is the sampler's.
pub type HeldList = Polled<Vec<HeldUnknown>>;

/// The stores with a rate or an in-flight cap set
/// ([`PgStore::stores_configured`], at most [`SETTINGS_LISTED_MAX`]).
pub type SettingsList = Polled<Vec<StoreFlow>>;

/// A list the dashboard shows, read every sampler interval by a loop of
/// its own, so that any number of viewers costs one read per interval, as
/// the snapshot does. Cheap to clone.
pub struct Polled<T> {
    inner: Arc<Mutex<PolledRead<T>>>,
}

impl<T> Clone for Polled<T> {
    fn clone(&self) -> Self {
        Polled {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Default for Polled<T> {
    fn default() -> Self {
        Polled {
            inner: Arc::new(Mutex::new(PolledRead {
                latest: None,
                error: None,
            })),
        }
    }
}

struct PolledRead<T> {
    /// The latest list read and when.
    latest: Option<(Instant, Arc<T>)>,
    /// Why the latest read failed (the list kept is older).
    error: Option<String>,
}

impl<T: Send + Sync + 'static> Polled<T> {
    /// Runs `read` every `every` until `shutdown`, the first at once;
    /// `what` names the list in the log when a read fails.
    pub fn start<F, Fut>(
        what: &'static str,
        every: Duration,
        shutdown: CancellationToken,
        mut read: F,
    ) -> Polled<T>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send,
    {
        let list = Polled::default();
        let me = list.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                let got = read().await;
                if let Err(e) = &got {
                    tracing::warn!(error = %e, "dashboard: cannot read {what}");
                }
                me.publish(got);
            }
        });
        list
    }

    fn publish(&self, read: Result<T, StoreError>) {
        let mut r = self.inner.lock().expect("dashboard list lock");
        match read {
            Ok(list) => {
                r.latest = Some((Instant::now(), Arc::new(list)));
                r.error = None;
            }
            Err(e) => r.error = Some(e.to_string()),
        }
    }

    /// The latest list, its age, and why the latest read failed.
    fn latest(&self) -> Latest<T> {
        let r = self.inner.lock().expect("dashboard list lock");
        Latest {
            list: r.latest.as_ref().map(|(_, list)| list.clone()),
            age: r.latest.as_ref().map(|(at, _)| at.elapsed()),
            error: r.error.clone(),
        }
    }
}

/// What [`Polled::latest`] has: the list and its age (None before the
/// first read), and why the latest read failed.
struct Latest<T> {
    list: Option<Arc<T>>,
    age: Option<Duration>,
    error: Option<String>,
}

#[derive(Clone)]
struct DashState {
    sampler: Sampler,
    held: HeldList,
    settings: SettingsList,
    auth: Auth,
}

/// The dashboard's routes alone (no fallback, so it merges into the API's).
pub fn router(sampler: Sampler, held: HeldList, settings: SettingsList, auth: Auth) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/dashboard", get(index))
        .route("/dashboard/", get(index))
        .route(
            "/dashboard/app.js",
            get(|| async { asset(APP_JS, "text/javascript", None) }),
        )
        .route(
            "/dashboard/report.js",
            get(|| async { asset(REPORT_JS, "text/javascript", None) }),
        )
        .route(
            "/dashboard/style.css",
            get(|| async { asset(STYLE_CSS, "text/css", None) }),
        )
        .route(
            "/dashboard/favicon.svg",
            get(|| async { asset(FAVICON_SVG, "image/svg+xml", None) }),
        )
        .route("/report", get(|| page(REPORT_HTML)))
        .route("/v1/ops/snapshot", get(snapshot))
        .with_state(DashState {
            sampler,
            held,
            settings,
            auth,
        })
}

async fn index() -> Response {
    page(INDEX_HTML).await
}

async fn page(html: &'static str) -> Response {
    asset(html, "text/html", Some(CSP))
}

/// A compiled-in file: its type (UTF-8), `nosniff`, `no-cache`, and the
/// `Content-Security-Policy` when one is given (pages). The dashboard and
/// the lesson (`courier lesson`) serve their static files through here.
pub fn asset(
    body: &'static str,
    content_type: &'static str,
    csp: Option<&'static str>,
) -> Response {
    let ct = format!("{content_type}; charset=utf-8");
    let mut r = (
        [
            (header::CONTENT_TYPE, ct),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
            (header::CACHE_CONTROL, "no-cache".to_string()),
        ],
        body,
    )
        .into_response();
    if let Some(csp) = csp {
        r.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(csp),
        );
    }
    r
}

/// `GET /v1/ops/snapshot`.
#[derive(Debug, Serialize)]
pub struct SnapshotAnswer<'a> {
    /// The latest sample, or None before the first one.
    pub snapshot: Option<&'a OpsSnapshot>,
    /// How old the sample is.
    pub sample_age_ms: Option<u64>,
    /// Why the latest attempt to sample failed (the sample shown is older).
    pub error: Option<String>,
    pub interval_ms: u64,
    pub history: Vec<HistoryPoint>,
    pub lease_ttl_ms: u64,
    pub key_retention_s: u64,
    pub intent_alert_s: u64,
    /// The actions held `unknown`, newest hold first, at most
    /// `held_unknown_max` (their count is `snapshot.by_state`'s); None
    /// before the first read.
    pub held_unknown: Option<&'a [HeldUnknown]>,
    pub held_unknown_max: i64,
    /// How old that list is.
    pub held_unknown_age_ms: Option<u64>,
    /// Why the latest read of that list failed (the list shown is older).
    pub held_unknown_error: Option<String>,
    /// The stores with a rate or an in-flight cap set, by name, at most
    /// `store_settings_max`; None before the first read.
    pub store_settings: Option<&'a [StoreFlow]>,
    pub store_settings_max: i64,
    /// How old that list is.
    pub store_settings_age_ms: Option<u64>,
    /// Why the latest read of that list failed (the list shown is older).
    pub store_settings_error: Option<String>,
}

async fn snapshot(State(s): State<DashState>, uri: Uri, headers: HeaderMap) -> Response {
    if let Err(e) = s.auth.check_admin(&uri, &headers) {
        return e.into_response();
    }
    let cfg = s.sampler.config();
    let latest = s.sampler.latest();
    let held = s.held.latest();
    let settings = s.settings.latest();
    let ms = |age: &Duration| u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    let answer = SnapshotAnswer {
        sample_age_ms: latest.as_ref().map(|(_, age)| ms(age)),
        snapshot: latest.as_ref().map(|(snap, _)| snap.as_ref()),
        error: s.sampler.last_error(),
        interval_ms: cfg.interval_ms,
        history: s.sampler.history(),
        lease_ttl_ms: cfg.query.lease_ttl_ms,
        key_retention_s: cfg.key_retention_s,
        intent_alert_s: cfg.query.intent_alert_s,
        held_unknown: held.list.as_ref().map(|list| list.as_slice()),
        held_unknown_max: HELD_LISTED_MAX,
        held_unknown_age_ms: held.age.as_ref().map(ms),
        held_unknown_error: held.error,
        store_settings: settings.list.as_ref().map(|list| list.as_slice()),
        store_settings_max: SETTINGS_LISTED_MAX,
        store_settings_age_ms: settings.age.as_ref().map(ms),
        store_settings_error: settings.error,
    };
    let mut r = Json(answer).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Escapes JSON text for a `<script type="application/json">` element: no
/// `<`, `>` or `&` can end the element or open a comment.
fn json_for_script(v: &serde_json::Value) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|_| "null".to_string())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A self-contained HTML page showing a JSON report (chaos, bench, verify)
/// with the same tables and charts as `/report`: styles, script and data
/// inlined, nothing fetched. Write it next to the JSON file.
pub fn render_report_html(json: &serde_json::Value) -> String {
    let title = match json.get("passed").and_then(|p| p.as_bool()) {
        Some(true) => "courier report: PASSED",
        Some(false) => "courier report: FAILED",
        None => "courier report",
    };
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>\n{STYLE_CSS}\n</style>\n</head>\n<body>\n\
         <main class=\"wrap\">\n<div id=\"report\" data-name=\"{name}\"></div>\n\
         <noscript><p>This report needs JavaScript; its data is the JSON file next to it.</p></noscript>\n\
         </main>\n<script type=\"application/json\" id=\"report-data\">{data}</script>\n\
         <script>\n{REPORT_JS}\n</script>\n</body>\n</html>\n",
        title = html_escape(title),
        name = "",
        data = json_for_script(json),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_report_file_is_self_contained_and_cannot_be_broken_out_of() {
        let hostile = json!({
            "passed": false,
            "note": "</script><script>alert(1)</script><!--",
            "done": {"kills_sent": 3}
        });
        let html = render_report_html(&hostile);
        // One closing tag per script element: the data cannot close its own.
        assert_eq!(html.matches("</script>").count(), 2, "{html}");
        assert!(!html.contains("<!--"));
        assert!(html.contains("courier report: FAILED"));
        assert!(!html.contains("src=\"/"), "nothing may be fetched");
        // The data survives the escaping.
        let start = html.find("id=\"report-data\">").unwrap() + "id=\"report-data\">".len();
        let end = start + html[start..].find("</script>").unwrap();
        let back: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(back, hostile);
    }

    #[test]
    fn assets_use_no_inline_script_and_no_remote_resource() {
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("report.html", REPORT_HTML),
            ("app.js", APP_JS),
            ("report.js", REPORT_JS),
            ("style.css", STYLE_CSS),
        ] {
            // The SVG namespace is a name, not a resource.
            let text_ = text.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !text_.contains("http://") && !text_.contains("https://"),
                "{name} refers to a remote resource"
            );
            assert!(!text.contains("innerHTML"), "{name} sets innerHTML");
        }
        // The report file inlines these: they must not end its script element.
        for (name, text) in [("report.js", REPORT_JS), ("style.css", STYLE_CSS)] {
            assert!(!text.contains("</script"), "{name} contains </script");
            assert!(!text.contains("</style"), "{name} contains </style");
        }
        // The pages load their scripts from files (the CSP forbids inline ones).
        for html in [INDEX_HTML, REPORT_HTML] {
            assert!(!html.contains("<script>"), "inline script in a page");
        }
    }

    fn held(id: i64) -> HeldUnknown {
        HeldUnknown {
            id,
            store: "s1".to_string(),
            to: "+15550000001".to_string(),
            held_at: "2025-01-02T03:04:05.678Z".to_string(),
            reason: "no_lookup".to_string(),
            attempts: 1,
            idempotency_key: Some(format!("k-{id}")),
        }
    }

    #[test]
    fn the_dashboard_snapshot_carries_the_held_list() {
        let list = vec![held(8), held(7)];
        let answer = SnapshotAnswer {
            snapshot: None,
            sample_age_ms: None,
            error: None,
            interval_ms: 2_000,
            history: Vec::new(),
            lease_ttl_ms: 30_000,
            key_retention_s: 86_400,
            intent_alert_s: 3_600,
            held_unknown: Some(&list),
            held_unknown_max: HELD_LISTED_MAX,
            held_unknown_age_ms: Some(5),
            held_unknown_error: None,
            store_settings: None,
            store_settings_max: SETTINGS_LISTED_MAX,
            store_settings_age_ms: None,
            store_settings_error: None,
        };
        let v = serde_json::to_value(&answer).unwrap();
        assert_eq!(v["held_unknown_max"], 50);
        assert_eq!(v["held_unknown_age_ms"], 5);
        // What the page reads of each row.
        assert_eq!(
            v["held_unknown"][0],
            json!({"id": 8, "store": "s1", "to": "+15550000001",
                   "held_at": "2025-01-02T03:04:05.678Z", "reason": "no_lookup",
                   "attempts": 1, "idempotency_key": "k-8"}),
            "{v}"
        );
        assert_eq!(v["held_unknown"][1]["id"], 7);
        for field in ["id", "store", "held_at", "attempts", "reason", "to"] {
            assert!(
                APP_JS.contains(&format!("a.{field}")),
                "app.js reads {field}"
            );
        }
    }

    #[test]
    fn the_dashboard_snapshot_carries_the_store_settings_the_page_reads() {
        let list = vec![StoreFlow {
            store: "shop-1".to_string(),
            settings: courier_core::rate::StoreSettings {
                rate_per_s: Some(5.0),
                burst: Some(10),
                in_flight_max: None,
            },
            in_flight: 2,
            tokens: Some(3.5),
            configured_at: None,
        }];
        let settings = SettingsList::default();
        settings.publish(Ok(list));
        let now = settings.latest();
        let answer = SnapshotAnswer {
            snapshot: None,
            sample_age_ms: None,
            error: None,
            interval_ms: 2_000,
            history: Vec::new(),
            lease_ttl_ms: 30_000,
            key_retention_s: 86_400,
            intent_alert_s: 3_600,
            held_unknown: None,
            held_unknown_max: HELD_LISTED_MAX,
            held_unknown_age_ms: None,
            held_unknown_error: None,
            store_settings: now.list.as_ref().map(|l| l.as_slice()),
            store_settings_max: SETTINGS_LISTED_MAX,
            store_settings_age_ms: Some(1),
            store_settings_error: None,
        };
        let v = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            v["store_settings"][0],
            json!({"store": "shop-1", "in_flight": 2, "tokens": 3.5, "configured_at": null,
                   "settings": {"rate_per_s": 5.0, "burst": 10, "in_flight_max": null}}),
            "{v}"
        );
        assert_eq!(v["store_settings_max"], 50);
        for field in [
            "f.store",
            "f.settings.rate_per_s",
            "f.settings.burst",
            "f.settings.in_flight_max",
            "f.in_flight",
            "f.tokens",
            "f.configured_at",
        ] {
            assert!(APP_JS.contains(field), "app.js reads {field}");
        }
        for field in [
            "g.settings.rate_per_s",
            "g.tokens",
            "g.paused_ms",
            "g.pauses",
        ] {
            assert!(APP_JS.contains(field), "app.js reads {field}");
        }
        assert!(APP_JS.contains("fetch(`/v1/providers/${encodeURIComponent(name)}`"));
        for id in [
            "store-settings",
            "settings-note",
            "gate-form",
            "gate-name",
            "gate-fields",
            "gate-answer",
        ] {
            assert!(
                INDEX_HTML.contains(&format!("id=\"{id}\"")),
                "index.html lacks #{id}"
            );
        }
    }

    #[test]
    fn the_dashboard_keeps_the_older_held_list_when_a_read_fails() {
        let list = HeldList::default();
        let now = list.latest();
        assert!(
            now.list.is_none() && now.age.is_none(),
            "nothing before the first read"
        );
        list.publish(Ok(vec![held(3)]));
        list.publish(Err(courier_store::StoreError::Unavailable(
            "gone".to_string(),
        )));
        let now = list.latest();
        assert_eq!(now.list.unwrap().as_slice(), &[held(3)]);
        assert_eq!(now.error.as_deref(), Some("database unavailable: gone"));
        list.publish(Ok(Vec::new()));
        let now = list.latest();
        assert!(now.list.unwrap().is_empty());
        assert_eq!(now.error, None);
    }

    #[test]
    fn the_dashboard_resolves_through_the_api_route_as_cancel_and_redrive_do() {
        // One POST helper for every button, with the page's token.
        assert_eq!(APP_JS.matches("fetch(`/v1/actions/${id}/${op}`").count(), 1);
        assert!(APP_JS.contains("postAction(op.id, op.op)"));
        assert!(APP_JS.contains("postAction(ask.id, \"resolve\", { outcome: ask.outcome })"));
        for id in [
            "held",
            "held-confirm",
            "held-confirm-yes",
            "held-confirm-no",
            "held-answer",
        ] {
            assert!(
                INDEX_HTML.contains(&format!("id=\"{id}\"")),
                "index.html lacks #{id}"
            );
        }
    }

    #[test]
    fn the_page_lists_every_action_state_in_life_order() {
        let start = APP_JS.find("const STATES = [").expect("STATES in app.js") + 16;
        let end = start + APP_JS[start..].find(']').expect("the end of STATES");
        let listed: Vec<&str> = APP_JS[start..end]
            .split(',')
            .map(|s| s.trim().trim_matches('"'))
            .collect();
        let all: Vec<&str> = courier_core::ActionState::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(listed, all);
        for s in all {
            assert!(
                APP_JS.contains(&format!("    {s}: \"#")),
                "app.js has no colour for {s}"
            );
        }
    }
}
