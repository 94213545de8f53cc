//! Read-only views of the courier database for operators: the dashboard's
//! snapshot, the metric gauges, and the enqueue-to-accepted latencies.
//!
//! Nothing here writes. Each snapshot runs in one `REPEATABLE READ READ ONLY`
//! transaction with a statement time-out, so its figures agree with each other,
//! the database refuses any write made through it by mistake, and a slow
//! database cannot hold a dashboard request for long.
//!
//! The schema has no heartbeat column: a worker's last heartbeat is derived
//! from its leases. A claim or a heartbeat sets `lease_until = now() + ttl`, so
//! the last one happened at `max(lease_until) - ttl`, where `ttl` is the lease
//! time-to-live the caller passes (the workers' `lease_ttl_ms`).
//!
//! # Invariants
//! - Every list has a row limit chosen by the caller and checked here
//!   ([`VIEW_ROWS_MAX`]); counts are exact, and the ones that grow with
//!   history (actions by state, events by kind, stores) are the maintained
//!   counts (`counts`, migration 6), so a snapshot does not scan history.
//! - A latency is read once: [`PgStore::accepted_latencies`] walks a cursor
//!   over `(accepted_at, action_id)` of `outbox_accepts` (migration 19) and
//!   only reads rows settled more than [`ACCEPTED_SETTLE_LAG_MS`] ago, so a
//!   transaction that committed late (its `now()` is its start) is not
//!   skipped. That table keeps [`ACCEPTS_KEEP_S`] of acceptances: a reader
//!   further behind skips what was trimmed.

use crate::counts::counts_read;
use crate::decode::{state_col, state_count};
use crate::error::StoreError;
use crate::pool::PgStore;
use crate::replication::{replication_read, Replication};
use chrono::{DateTime, Utc};
use courier_core::ActionState;
use serde::Serialize;

/// The most rows any one list of a view may ask for.
pub const VIEW_ROWS_MAX: u32 = 1_000;
/// How long a view's statement may run before the database cancels it.
pub const VIEW_STATEMENT_TIMEOUT_MS: u64 = 3_000;
/// Accepted actions are read this long after their settle, so that every
/// transaction stamped before the cursor has committed.
pub const ACCEPTED_SETTLE_LAG_MS: u64 = 2_000;
/// Acceptances are kept this long in `outbox_accepts` for the walk of
/// [`PgStore::accepted_latencies`]; the pruner's fold trims older ones
/// ([`PgStore::accepts_trim`]). The dashboard samples every 2 s.
pub const ACCEPTS_KEEP_S: u64 = 300;

/// What a snapshot should contain.
#[derive(Debug, Clone)]
pub struct SnapshotQuery {
    /// Stores listed (the busiest first); the total is counted apart.
    pub stores_max: u32,
    /// Lease owners listed (the ones holding most first).
    pub owners_max: u32,
    /// Open intents listed (the oldest first).
    pub intents_max: u32,
    /// Events listed (the newest first).
    pub events_max: u32,
    /// Kinds of the events listed (e.g. `fenced`, `backward`).
    pub event_kinds: Vec<String>,
    /// Open intents older than this are counted as alerts.
    pub intent_alert_s: u64,
    /// The workers' lease time-to-live, to derive the last heartbeat.
    pub lease_ttl_ms: u64,
}

impl SnapshotQuery {
    fn check(&self) -> Result<(), StoreError> {
        for (name, n) in [
            ("stores_max", self.stores_max),
            ("owners_max", self.owners_max),
            ("intents_max", self.intents_max),
            ("events_max", self.events_max),
        ] {
            if n > VIEW_ROWS_MAX {
                return Err(StoreError::Query(format!(
                    "{name} = {n} is above the view limit of {VIEW_ROWS_MAX} rows"
                )));
            }
        }
        Ok(())
    }
}

/// One store's load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreLoad {
    pub store: String,
    /// Actions waiting to be claimed.
    pub pending: i64,
    /// Actions held by workers (the store row's counter).
    pub in_flight: i32,
    /// Age of the oldest pending action, in seconds.
    pub oldest_pending_s: Option<f64>,
}

/// The leases one owner (a worker process) holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnerLeases {
    pub owner: String,
    /// Claimed actions whose lease this owner holds (live or expired).
    pub held: i64,
    /// Of those, leases that ran out (awaiting a reclaim).
    pub expired: i64,
    pub epoch_min: i64,
    pub epoch_max: i64,
    /// Time left on its longest lease, in seconds (negative: all ran out).
    pub lease_left_s: f64,
    /// Seconds since its last claim or heartbeat (`max(lease_until) - ttl`).
    pub heartbeat_age_s: f64,
}

/// An intent without a final status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenIntent {
    pub action_id: i64,
    pub store: String,
    pub key: String,
    pub status: String,
    pub state: ActionState,
    pub attempts: i32,
    pub age_s: f64,
}

/// A row of the `events` table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    pub id: i64,
    /// RFC 3339, UTC.
    pub at: String,
    pub kind: String,
    pub action_id: Option<i64>,
    pub detail: String,
}

/// Everything the dashboard and the gauges show, read at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OpsSnapshot {
    /// The database's clock when the snapshot was taken (ms since the epoch).
    pub db_now_ms: i64,
    /// Actions by state, every state present (zero included), in life order.
    pub by_state: Vec<(ActionState, i64)>,
    pub stores: Vec<StoreLoad>,
    pub stores_total: i64,
    pub owners: Vec<OwnerLeases>,
    pub oldest_intents: Vec<OpenIntent>,
    /// From the maintained counts.
    pub open_intents: i64,
    /// Counted up to [`crate::INTENTS_PAST_ALERT_COUNTED_MAX`].
    pub intents_older_than_alert: i64,
    pub events: Vec<EventRow>,
    /// Every event kind with its count.
    pub event_counts: Vec<(String, i64)>,
    /// The node the snapshot was read from and its standbys' lag.
    pub replication: Replication,
}

impl OpsSnapshot {
    /// Actions in a state: an [`ActionState`], or its name (`"done"`).
    pub fn state(&self, s: impl AsRef<str>) -> i64 {
        state_count(&self.by_state, s.as_ref())
    }
    pub fn event_count(&self, kind: &str) -> i64 {
        self.event_counts
            .iter()
            .find(|(k, _)| k == kind)
            .map_or(0, |(_, v)| *v)
    }
}

/// Where the walk over accepted actions stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptedCursor {
    pub accepted_at: DateTime<Utc>,
    pub action_id: i64,
}

/// A page of enqueue-to-accepted latencies and the cursor after it.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedPage {
    /// Seconds from enqueue to the provider's acceptance, one per action.
    pub latencies_s: Vec<f64>,
    pub next: AcceptedCursor,
}

impl PgStore {
    /// The operator's view, in one read-only transaction.
    pub async fn ops_snapshot(&self, q: &SnapshotQuery) -> Result<OpsSnapshot, StoreError> {
        q.check()?;
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        tx.batch_execute(&format!(
            "SET LOCAL statement_timeout = {VIEW_STATEMENT_TIMEOUT_MS}"
        ))
        .await?;

        let db_now_ms: i64 = tx
            .query_one("SELECT (extract(epoch FROM now()) * 1000)::bigint", &[])
            .await?
            .get(0);

        let counts = counts_read(&*tx).await?;
        let by_state = counts.by_state_all()?;
        let now = self.clock.now();
        let stores = snapshot_stores(&tx, q, now).await?;
        let stores_total = counts.get("stores");
        let owners = snapshot_owners(&tx, q).await?;
        let open_intents = counts.open_intents();
        let (oldest_intents, intents_older_than_alert) = snapshot_intents(&tx, q, now).await?;
        let events = snapshot_events(&tx, q).await?;
        let event_counts = counts.under("events.");
        let replication = replication_read(&*tx).await?;
        tx.commit().await?;
        Ok(OpsSnapshot {
            db_now_ms,
            by_state,
            stores,
            stores_total,
            owners,
            oldest_intents,
            open_intents,
            intents_older_than_alert,
            events,
            event_counts,
            replication,
        })
    }

    /// Where a walk over accepted actions starts when it should skip the
    /// past: the database's clock, less the settle lag.
    pub async fn accepted_cursor_now(&self) -> Result<AcceptedCursor, StoreError> {
        let client = self.client().await?;
        let lag = ACCEPTED_SETTLE_LAG_MS as f64;
        let at: DateTime<Utc> = client
            .query_one("SELECT now() - $1 * interval '1 millisecond'", &[&lag])
            .await?
            .get(0);
        Ok(AcceptedCursor {
            accepted_at: at,
            action_id: i64::MAX,
        })
    }

    /// Enqueue-to-accepted latencies of actions accepted after `after` (and
    /// at least [`ACCEPTED_SETTLE_LAG_MS`] ago), oldest first, at most `limit`.
    pub async fn accepted_latencies(
        &self,
        after: AcceptedCursor,
        limit: u32,
    ) -> Result<AcceptedPage, StoreError> {
        if limit > VIEW_ROWS_MAX * 10 {
            return Err(StoreError::Query(format!(
                "limit {limit} is above {} rows",
                VIEW_ROWS_MAX * 10
            )));
        }
        let client = self.client().await?;
        let lag = ACCEPTED_SETTLE_LAG_MS as f64;
        let rows = client
            .query(
                "SELECT x.accepted_at, x.action_id,
                        greatest(extract(epoch FROM x.accepted_at - a.enqueued_at), 0)::float8
                 FROM outbox_accepts x JOIN actions a ON a.id = x.action_id
                 WHERE (x.accepted_at, x.action_id) > ($1, $2)
                   AND x.accepted_at <= now() - $3 * interval '1 millisecond'
                 ORDER BY x.accepted_at, x.action_id
                 LIMIT $4",
                &[
                    &after.accepted_at,
                    &after.action_id,
                    &lag,
                    &i64::from(limit),
                ],
            )
            .await?;
        let next = rows.last().map_or(after, |r| AcceptedCursor {
            accepted_at: r.get(0),
            action_id: r.get(1),
        });
        Ok(AcceptedPage {
            latencies_s: rows.iter().map(|r| r.get(2)).collect(),
            next,
        })
    }

    /// Rows in every courier table: tests use it to show that refused
    /// requests changed nothing.
    pub async fn table_rows(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM stores), (SELECT count(*) FROM actions),
                        (SELECT count(*) FROM outbox), (SELECT count(*) FROM webhook_events),
                        (SELECT count(*) FROM events)",
                &[],
            )
            .await?;
        Ok(["stores", "actions", "outbox", "webhook_events", "events"]
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), row.get::<_, i64>(i)))
            .collect())
    }
}

type ReadTx<'a> = deadpool_postgres::Transaction<'a>;

/// The time the shared statements read (the store's clock).
type Now = Option<chrono::DateTime<chrono::Utc>>;

/// The busiest stores.
async fn snapshot_stores(
    tx: &ReadTx<'_>,
    q: &SnapshotQuery,
    now: Now,
) -> Result<Vec<StoreLoad>, StoreError> {
    Ok(tx
        .query(
            sql!("report/store_backlog"),
            &[&i64::from(q.stores_max), &now],
        )
        .await?
        .iter()
        .map(|r| StoreLoad {
            store: r.get("store"),
            in_flight: r.get("in_flight"),
            pending: r.get("pending"),
            oldest_pending_s: r.get("oldest_pending_s"),
        })
        .collect())
}

/// The owners holding most leases.
async fn snapshot_owners(
    tx: &ReadTx<'_>,
    q: &SnapshotQuery,
) -> Result<Vec<OwnerLeases>, StoreError> {
    let ttl_ms = q.lease_ttl_ms as f64;
    Ok(tx
        .query(
            "SELECT owner, count(*) AS held,
                    count(*) FILTER (WHERE lease_until < now()) AS expired,
                    min(epoch) AS epoch_min, max(epoch) AS epoch_max,
                    extract(epoch FROM max(lease_until) - now())::float8 AS lease_left_s,
                    extract(epoch FROM now() - (max(lease_until)
                            - $2 * interval '1 millisecond'))::float8 AS heartbeat_age_s
             FROM actions_held
             GROUP BY owner
             ORDER BY count(*) DESC, owner
             LIMIT $1",
            &[&i64::from(q.owners_max), &ttl_ms],
        )
        .await?
        .iter()
        .map(|r| OwnerLeases {
            owner: r.get("owner"),
            held: r.get("held"),
            expired: r.get("expired"),
            epoch_min: r.get("epoch_min"),
            epoch_max: r.get("epoch_max"),
            lease_left_s: r.get("lease_left_s"),
            heartbeat_age_s: r.get("heartbeat_age_s"),
        })
        .collect())
}

/// The oldest open intents, and how many are older than the alert (counted
/// up to [`crate::INTENTS_PAST_ALERT_COUNTED_MAX`]; how many are open comes
/// from the maintained counts).
async fn snapshot_intents(
    tx: &ReadTx<'_>,
    q: &SnapshotQuery,
    now: Now,
) -> Result<(Vec<OpenIntent>, i64), StoreError> {
    let oldest_intents = tx
        .query(
            "SELECT o.action_id, a.store, o.idem_key, o.status, a.state, o.attempts,
                    extract(epoch FROM now() - o.created_at)::float8 AS age_s
             FROM intents_watched w
             JOIN outbox o ON o.action_id = w.action_id
             JOIN actions a ON a.id = o.action_id
             WHERE w.open
             ORDER BY w.created_at, w.action_id
             LIMIT $1",
            &[&i64::from(q.intents_max)],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(OpenIntent {
                action_id: r.get("action_id"),
                store: r.get("store"),
                key: r.get("idem_key"),
                status: r.get("status"),
                state: state_col(r, "state")?,
                attempts: r.get("attempts"),
                age_s: r.get("age_s"),
            })
        })
        .collect::<Result<_, StoreError>>()?;
    let alert = q.intent_alert_s as f64;
    let older: i64 = tx
        .query_one(
            sql!("outbox/open_older_than"),
            &[&alert, &crate::INTENTS_PAST_ALERT_COUNTED_MAX, &now],
        )
        .await?
        .get(0);
    Ok((oldest_intents, older))
}

/// The newest `$2` events of kind `$1`, newest first (see
/// `snapshot_events`; `tests/snapshot_events.rs` plans it). The kind is
/// asked as a range of one value and the order is (kind, id): with an
/// equality the kind drops out of the order, and then a backwards walk of
/// the primary key that filters on the kind also gives it, which the planner
/// took for a common kind. Only `events_kind_id` gives this order.
pub const EVENTS_NEWEST_OF_KIND: &str = "SELECT id,
        to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS at,
        kind, action_id, detail
 FROM events
 WHERE kind >= $1 AND kind <= $1
 ORDER BY kind DESC, id DESC
 LIMIT $2";

/// The newest events of the kinds asked for: one statement per kind, each a
/// backwards walk of the index `events_kind_id` (migration 7) from the
/// newest event of its kind ([`EVENTS_NEWEST_OF_KIND`]), so
/// the cost is kinds x rows, not the events kept. One statement for every
/// kind (a lateral join over the kinds) was planned without knowing the kind
/// and walked the primary key backwards filtering on it: 2.1 s with 800,000
/// events of which none of the kind asked for. Asking for the rows of a kind
/// directly still let a common kind walk the primary key, which costs what
/// lies between the newest event and the newest of that kind: 385 ms when
/// the newest 500,000 events were of another kind (an investigation in the git
/// history of docs/benchmarks.md).
async fn snapshot_events(tx: &ReadTx<'_>, q: &SnapshotQuery) -> Result<Vec<EventRow>, StoreError> {
    let mut kinds = q.event_kinds.clone();
    kinds.sort();
    kinds.dedup();
    let limit = i64::from(q.events_max);
    let mut events = Vec::new();
    for kind in &kinds {
        let rows = tx.query(EVENTS_NEWEST_OF_KIND, &[kind, &limit]).await?;
        events.extend(rows.iter().map(|r| EventRow {
            id: r.get("id"),
            at: r.get("at"),
            kind: r.get("kind"),
            action_id: r.get("action_id"),
            detail: r.get("detail"),
        }));
    }
    events.sort_by_key(|e| std::cmp::Reverse(e.id));
    events.truncate(q.events_max as usize);
    Ok(events)
}
