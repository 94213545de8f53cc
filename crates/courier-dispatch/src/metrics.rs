//! Metrics of courier processes, in the Prometheus text format.
//!
//! - [`recorder`] installs the process's recorder once (the `metrics` macros
//!   used across the runtime record into it) and [`router`] serves
//!   `GET /metrics` from it; [`serve_standalone`] is the worker's own port.
//! - [`claim_observed`] is the worker's claim-latency histogram.
//! - [`Sampler`] runs in `courier serve`: every `interval_ms` it reads one
//!   read-only snapshot of the database ([`courier_store::OpsSnapshot`]),
//!   publishes it as gauges, keeps the dashboard's history of actions by
//!   state, and turns newly accepted actions into the enqueue-to-accepted
//!   histogram.
//!
//! Counters recorded elsewhere: `courier_claims_total`, `courier_reclaims_total`,
//! `courier_fenced_writes_total{op}`, `courier_lookups_total{answer}`,
//! `courier_sends_total{answer}`, `courier_settled_total`,
//! `courier_rejections_total`, `courier_enqueued_total{created}`,
//! `courier_webhooks_total{outcome}` (its outcomes `backward_ignored` and
//! `duplicate` count backward reports ignored and duplicate webhooks
//! absorbed), `courier_webhook_signature_failures_total`.
//!
//! # Invariants
//! - One database snapshot per interval, however many dashboards and
//!   scrapers ask: they read the latest sample, never the database.
//! - Each accepted action is observed once by a sampler (see
//!   `courier_store::views`); several `courier serve` processes each observe
//!   it once, so read that histogram from one of them.
//! - Label sets are bounded: per-store gauges cover the `gauge_stores_max`
//!   busiest stores, and a store that leaves that list is dropped after
//!   [`GAUGE_IDLE_MS`].

use crate::auth::Auth;
use crate::server::{serve, HttpLimits, ServeError};
use axum::extract::State;
use axum::http::{header, HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use courier_core::{ActionState, Limits};
use courier_store::{AcceptedCursor, OpsSnapshot, PgStore, SnapshotQuery, VIEW_ROWS_MAX};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Seconds one claim statement took (the worker's round trip to PostgreSQL).
pub const CLAIM_DURATION: &str = "courier_claim_duration_seconds";
/// Seconds from enqueue to the provider's acceptance, per action.
pub const ENQUEUE_TO_ACCEPTED: &str = "courier_enqueue_to_accepted_seconds";
/// Steps of about 1.5x, so a p99 read from the buckets (the soak's) moves
/// with the claim's cost, not only by factors of 2.5.
const CLAIM_BUCKETS_S: &[f64] = &[
    0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
    0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5,
];
const ENQUEUE_TO_ACCEPTED_BUCKETS_S: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];
/// A gauge not set for this long is dropped from the output.
pub const GAUGE_IDLE_MS: u64 = 30_000;
/// How often the recorder drains histograms.
pub const UPKEEP_INTERVAL_MS: u64 = 5_000;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static INSTALL: Mutex<()> = Mutex::new(());

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot install the metrics recorder: {0}")]
    Install(String),
    #[error("cannot listen for metrics on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("bad sampler configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// The process's Prometheus recorder, installed on first call (later calls
/// return the same handle). Fails if another recorder was installed first.
pub fn recorder() -> Result<PrometheusHandle, MetricsError> {
    let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(CLAIM_DURATION.into()), CLAIM_BUCKETS_S)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(ENQUEUE_TO_ACCEPTED.into()),
                ENQUEUE_TO_ACCEPTED_BUCKETS_S,
            )
        })
        .map_err(|e| MetricsError::Install(e.to_string()))?
        .idle_timeout(
            MetricKindMask::GAUGE,
            Some(Duration::from_millis(GAUGE_IDLE_MS)),
        )
        .install_recorder()
        .map_err(|e| MetricsError::Install(e.to_string()))?;
    describe();
    let h = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(UPKEEP_INTERVAL_MS));
            h.run_upkeep();
        })
        .map_err(|e| MetricsError::Install(e.to_string()))?;
    let _ = HANDLE.set(handle.clone());
    Ok(handle)
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!("courier_claims_total", "Actions claimed by this worker.");
    describe_counter!(
        "courier_reclaims_total",
        "Actions claimed after another owner's lease ran out."
    );
    describe_counter!(
        "courier_fenced_writes_total",
        "Writes refused because another worker holds the action at a newer epoch."
    );
    describe_counter!("courier_lookups_total", "Provider lookups, by answer.");
    describe_counter!("courier_sends_total", "Provider sends, by answer.");
    describe_counter!("courier_settled_total", "Actions settled by this worker.");
    describe_counter!("courier_rejections_total", "Actions the provider refused.");
    describe_counter!("courier_enqueued_total", "Enqueue requests, by created.");
    describe_counter!(
        "courier_webhooks_total",
        "Signed webhooks, by outcome (backward_ignored, duplicate, ...)."
    );
    describe_counter!(
        "courier_webhook_signature_failures_total",
        "Webhooks refused for a missing or wrong signature."
    );
    describe_histogram!(
        CLAIM_DURATION,
        Unit::Seconds,
        "Duration of one claim statement, measured in the worker."
    );
    describe_histogram!(
        ENQUEUE_TO_ACCEPTED,
        Unit::Seconds,
        "Time from enqueue to the provider's acceptance, per action."
    );
    describe_gauge!("courier_actions", "Actions by state.");
    describe_gauge!("courier_stores", "Stores known.");
    describe_gauge!("courier_store_pending", "Pending actions of a busy store.");
    describe_gauge!(
        "courier_store_in_flight",
        "Claimed actions of a busy store."
    );
    describe_gauge!("courier_open_intents", "Intents without a final status.");
    describe_gauge!(
        "courier_intents_older_than_alert",
        "Open intents older than the alert threshold (a share of the key retention), counted up to 10,000."
    );
    describe_gauge!(
        "courier_oldest_open_intent_age_seconds",
        Unit::Seconds,
        "Age of the oldest intent without a final status."
    );
    describe_gauge!("courier_lease_owners", "Workers holding leases.");
    describe_gauge!(
        "courier_leases_expired",
        "Claimed actions whose lease ran out (awaiting a reclaim)."
    );
    describe_gauge!("courier_events", "Rows of the events table, by kind.");
    describe_gauge!(
        "courier_sample_age_seconds",
        Unit::Seconds,
        "Age of the latest database sample of this server."
    );
    describe_counter!(
        "courier_sample_errors_total",
        "Database samples that failed."
    );
}

/// Records one claim statement's round trip (the worker calls it).
pub fn claim_observed(elapsed: Duration) {
    metrics::histogram!(CLAIM_DURATION).record(elapsed.as_secs_f64());
}

/// The Prometheus text of `handle`.
pub fn render(handle: &PrometheusHandle) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

#[derive(Clone)]
struct MetricsState {
    handle: PrometheusHandle,
    auth: Auth,
}

async fn metrics_text(State(s): State<MetricsState>, uri: Uri, headers: HeaderMap) -> Response {
    match s.auth.check_admin(&uri, &headers) {
        Ok(()) => render(&s.handle),
        Err(e) => e.into_response(),
    }
}

/// `GET /metrics`; unless `auth` is open, scrapers send an admin token.
pub fn router(handle: PrometheusHandle, auth: Auth) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .with_state(MetricsState { handle, auth })
}

/// Installs the recorder and serves `GET /metrics` on `listen` (a worker's
/// `--metrics-listen`) until `shutdown`, open or behind `token` (an admin
/// token, `--metrics-token`); returns the bound address. Whether `listen`
/// may be reached from other machines is the caller's to check
/// ([`crate::server::beyond_loopback`]).
pub async fn serve_standalone(
    listen: &str,
    token: Option<String>,
    shutdown: CancellationToken,
) -> Result<SocketAddr, MetricsError> {
    let handle = recorder()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| MetricsError::Listen {
            addr: listen.to_string(),
            source,
        })?;
    let addr = listener
        .local_addr()
        .map_err(|source| MetricsError::Listen {
            addr: listen.to_string(),
            source,
        })?;
    let limits = HttpLimits {
        connections_max: 64,
        ..HttpLimits::default()
    };
    limits.validate()?;
    let app = router(handle, Auth::admin_only(token));
    tokio::spawn(async move {
        if let Err(e) = serve(listener, app, &limits, shutdown).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(addr)
}

/// What the sampler reads and keeps.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Time between two database samples.
    pub interval_ms: u64,
    /// Samples kept for the dashboard's chart.
    pub history_points_max: usize,
    /// Stores exported as per-store gauges (the busiest).
    pub gauge_stores_max: usize,
    /// Accepted actions turned into latencies per sample, at most.
    pub accepted_per_sample_max: u32,
    pub query: SnapshotQuery,
    /// The provider's key retention, for the dashboard's intent ages.
    pub key_retention_s: u64,
}

/// Event kinds the dashboard lists.
pub const LISTED_EVENT_KINDS: &[&str] = &["fenced", "backward", "conflict", "reclaimed"];

impl SamplerConfig {
    /// Defaults that fit `limits`: a sample every `interval_ms`, ten minutes
    /// of history.
    pub fn for_limits(limits: &Limits, interval_ms: u64) -> Self {
        let history_ms = 10 * 60 * 1000;
        SamplerConfig {
            interval_ms,
            history_points_max: (history_ms / interval_ms.max(1)).clamp(2, 3_600) as usize,
            gauge_stores_max: 100,
            accepted_per_sample_max: 5_000,
            query: SnapshotQuery {
                stores_max: 200,
                owners_max: 100,
                intents_max: 20,
                events_max: 30,
                event_kinds: LISTED_EVENT_KINDS.iter().map(|s| s.to_string()).collect(),
                intent_alert_s: limits.intent_age_alert_s(),
                lease_ttl_ms: limits.lease_ttl_ms,
            },
            key_retention_s: limits.key_retention_s,
        }
    }

    pub fn validate(&self) -> Result<(), MetricsError> {
        let bad = |m: &str| Err(MetricsError::Config(m.to_string()));
        if !(100..=60_000).contains(&self.interval_ms) {
            return bad("interval_ms must be within 100..=60000");
        }
        if !(2..=3_600).contains(&self.history_points_max) {
            return bad("history_points_max must be within 2..=3600");
        }
        if self.gauge_stores_max > VIEW_ROWS_MAX as usize
            || self.gauge_stores_max > self.query.stores_max as usize
        {
            return bad("gauge_stores_max must be at most query.stores_max");
        }
        if self.accepted_per_sample_max == 0 || self.accepted_per_sample_max > 10 * VIEW_ROWS_MAX {
            return bad("accepted_per_sample_max must be within 1..=10000");
        }
        Ok(())
    }
}

/// Actions by state at one instant (the database's clock): one field per
/// [`ActionState`], named as the state (the dashboard's chart reads them by
/// name; a test keeps the two lists equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HistoryPoint {
    pub t_ms: i64,
    pub scheduled: i64,
    pub pending: i64,
    pub claimed: i64,
    pub dispatched: i64,
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub expired: i64,
    pub unknown: i64,
}

impl HistoryPoint {
    fn of(s: &OpsSnapshot) -> Self {
        HistoryPoint {
            t_ms: s.db_now_ms,
            scheduled: s.state(ActionState::Scheduled),
            pending: s.state(ActionState::Pending),
            claimed: s.state(ActionState::Claimed),
            dispatched: s.state(ActionState::Dispatched),
            done: s.state(ActionState::Done),
            failed: s.state(ActionState::Failed),
            cancelled: s.state(ActionState::Cancelled),
            expired: s.state(ActionState::Expired),
            unknown: s.state(ActionState::Unknown),
        }
    }
}

struct Inner {
    cfg: SamplerConfig,
    latest: Mutex<Option<(Instant, Arc<OpsSnapshot>)>>,
    history: Mutex<VecDeque<HistoryPoint>>,
    last_error: Mutex<Option<String>>,
}

/// The database sampler of `courier serve`. Cheap to clone.
#[derive(Clone)]
pub struct Sampler {
    inner: Arc<Inner>,
}

impl Sampler {
    /// Starts sampling `store` until `shutdown`; the first sample is taken at once.
    pub fn start(
        store: PgStore,
        cfg: SamplerConfig,
        shutdown: CancellationToken,
    ) -> Result<Sampler, MetricsError> {
        cfg.validate()?;
        let s = Sampler {
            inner: Arc::new(Inner {
                history: Mutex::new(VecDeque::with_capacity(cfg.history_points_max)),
                cfg,
                latest: Mutex::new(None),
                last_error: Mutex::new(None),
            }),
        };
        let me = s.clone();
        tokio::spawn(async move { me.run(store, shutdown).await });
        Ok(s)
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.inner.cfg
    }

    /// The latest sample and its age.
    pub fn latest(&self) -> Option<(Arc<OpsSnapshot>, Duration)> {
        self.inner
            .latest
            .lock()
            .expect("sampler lock")
            .as_ref()
            .map(|(at, s)| (s.clone(), at.elapsed()))
    }

    /// Actions by state over the kept window, oldest first.
    pub fn history(&self) -> Vec<HistoryPoint> {
        self.inner
            .history
            .lock()
            .expect("sampler lock")
            .iter()
            .copied()
            .collect()
    }

    /// Why the latest attempt failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.inner.last_error.lock().expect("sampler lock").clone()
    }

    async fn run(&self, store: PgStore, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(self.inner.cfg.interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut cursor: Option<AcceptedCursor> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            let outcome = async {
                let snap = store.ops_snapshot(&self.inner.cfg.query).await?;
                self.publish(snap);
                let at = match cursor {
                    Some(c) => c,
                    None => store.accepted_cursor_now().await?,
                };
                let page = store
                    .accepted_latencies(at, self.inner.cfg.accepted_per_sample_max)
                    .await?;
                for s in &page.latencies_s {
                    metrics::histogram!(ENQUEUE_TO_ACCEPTED).record(*s);
                }
                cursor = Some(page.next);
                Ok::<_, courier_store::StoreError>(())
            }
            .await;
            let mut err = self.inner.last_error.lock().expect("sampler lock");
            match outcome {
                Ok(()) => *err = None,
                Err(e) => {
                    metrics::counter!("courier_sample_errors_total").increment(1);
                    tracing::warn!(error = %e, "metrics sampler: cannot read the database");
                    *err = Some(e.to_string());
                }
            }
            if let Some((_, age)) = self.latest() {
                metrics::gauge!("courier_sample_age_seconds").set(age.as_secs_f64());
            }
        }
    }

    fn publish(&self, snap: OpsSnapshot) {
        let cfg = &self.inner.cfg;
        for state in ActionState::ALL {
            metrics::gauge!("courier_actions", "state" => state.as_str())
                .set(snap.state(state) as f64);
        }
        metrics::gauge!("courier_stores").set(snap.stores_total as f64);
        for s in snap.stores.iter().take(cfg.gauge_stores_max) {
            metrics::gauge!("courier_store_pending", "store" => s.store.clone())
                .set(s.pending as f64);
            metrics::gauge!("courier_store_in_flight", "store" => s.store.clone())
                .set(f64::from(s.in_flight));
        }
        metrics::gauge!("courier_open_intents").set(snap.open_intents as f64);
        metrics::gauge!("courier_intents_older_than_alert")
            .set(snap.intents_older_than_alert as f64);
        metrics::gauge!("courier_oldest_open_intent_age_seconds").set(
            snap.oldest_intents
                .first()
                .map_or(0.0, |i| i.age_s.max(0.0)),
        );
        metrics::gauge!("courier_lease_owners").set(snap.owners.len() as f64);
        metrics::gauge!("courier_leases_expired")
            .set(snap.owners.iter().map(|o| o.expired).sum::<i64>() as f64);
        for (kind, n) in &snap.event_counts {
            metrics::gauge!("courier_events", "kind" => kind.clone()).set(*n as f64);
        }
        {
            let mut h = self.inner.history.lock().expect("sampler lock");
            if h.len() == cfg.history_points_max {
                h.pop_front();
            }
            h.push_back(HistoryPoint::of(&snap));
        }
        *self.inner.latest.lock().expect("sampler lock") = Some((Instant::now(), Arc::new(snap)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_point_has_one_field_per_state() {
        let snap = OpsSnapshot {
            db_now_ms: 7,
            by_state: ActionState::ALL
                .iter()
                .zip(1..)
                .map(|(s, n)| (*s, n))
                .collect(),
            ..Default::default()
        };
        let v = serde_json::to_value(HistoryPoint::of(&snap)).unwrap();
        let fields = v.as_object().unwrap();
        assert_eq!(fields.len(), 1 + ActionState::ALL.len(), "{v}");
        assert_eq!(v["t_ms"], 7);
        for (s, n) in ActionState::ALL.iter().zip(1..) {
            assert_eq!(v[s.as_str()], n, "{s}: {v}");
        }
    }
}
