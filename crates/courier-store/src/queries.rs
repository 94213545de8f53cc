//! Every query of the courier, named entity-then-verb.

use crate::{StoreConfig, StoreError};
use courier_core::status::{merge, merge_lookup, Merge};
use courier_core::Status;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde::Serialize;
use std::str::FromStr;
use std::sync::Arc;
use tokio_postgres::{GenericClient, NoTls, Row};

/// The store: a pool of connections to the courier database.
#[derive(Clone)]
pub struct PgStore {
    pub(crate) pool: Pool,
}

/// A claim's proof of ownership: every later write checks all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub action_id: i64,
    pub owner: Arc<str>,
    pub epoch: i64,
}

/// A write refused because the action is no longer ours: an expected outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    /// The action's epoch now (None if the action is gone).
    pub current_epoch: Option<i64>,
}

/// An action just claimed.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub lease: Lease,
    pub uid: String,
    pub store: String,
    pub to: String,
    pub body: String,
    /// True when the lease had expired under another owner.
    pub reclaimed: bool,
    /// True when the claim also wrote the send intent (with the key
    /// `action_key(uid)`) and counted its first attempt: the request may
    /// leave once the owner's lease check passes, and if it does not, the
    /// next step is a lookup.
    pub attempt_counted: bool,
}

/// How a worker picks the next actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimMode {
    /// The store served least recently, among stores with work and fewer than
    /// `store_in_flight_max` actions in flight; then its oldest action.
    Fair,
    /// The oldest pending action of all, whatever its store.
    Fifo,
}

impl FromStr for ClaimMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fair" => Ok(ClaimMode::Fair),
            "fifo" => Ok(ClaimMode::Fifo),
            other => Err(format!("unknown claim mode {other:?} (fair | fifo)")),
        }
    }
}

/// The outbox row as the owner sees it after writing (or finding) the intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub key: String,
    pub attempts: u32,
    pub status: Status,
    /// True when this call wrote the intent; false when it already existed.
    pub written_now: bool,
}

/// Why an attempt was not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptRefused {
    Fenced(Fenced),
    /// Our lease ends within the margin: extend it first.
    LeaseShort,
}

/// What a heartbeat found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heartbeat {
    /// Leases extended.
    pub held: Vec<i64>,
    /// Actions now held by another owner or at a newer epoch.
    pub fenced: Vec<i64>,
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    pub status: Status,
    pub merge: Merge,
}

/// The result of merging a report that arrived without a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeOutcome {
    Applied(Merge),
    /// This webhook event id was seen before: nothing changed.
    Duplicate,
    /// No intent has this key.
    UnknownKey,
}

/// A new action.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, Serialize)]
pub struct NewAction {
    pub store: String,
    pub to: String,
    pub body: String,
    pub key: Option<String>,
}

/// An action as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionView {
    pub id: i64,
    pub store: String,
    pub key: Option<String>,
    pub to: String,
    pub state: String,
    pub epoch: i64,
    pub status: Option<Status>,
    pub idempotency_key: Option<String>,
    pub attempts: i32,
    pub message_id: Option<String>,
    pub fail_reason: Option<String>,
    pub enqueued_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    Created(i64),
    /// The same `(store, key)` with the same content: the first action.
    Existing(i64),
}

#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    #[error("key reused with a different request")]
    KeyReused { existing_id: i64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An action whose final status is overdue (or in conflict): look it up.
#[derive(Debug, Clone)]
pub struct DueCheck {
    pub action_id: i64,
    pub key: String,
}

/// What the verifier needs to know of each action.
#[derive(Debug, Clone, Serialize)]
pub struct ActionOutcome {
    pub action_id: i64,
    /// The action's uid, from which its idempotency key derives.
    pub uid: String,
    pub state: String,
    pub final_status: Option<Status>,
}

/// Counts for `courier status`, the demo and the chaos report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub by_state: Vec<(String, i64)>,
    pub by_status: Vec<(String, i64)>,
    pub events: Vec<(String, i64)>,
    pub stores: Vec<StoreBacklog>,
    pub oldest_open_intent_s: Option<f64>,
    pub intents_older_than_alert: i64,
    pub attempts_total: i64,
    pub lookups_total: i64,
}

impl Summary {
    pub fn state(&self, s: &str) -> i64 {
        self.by_state
            .iter()
            .find(|(k, _)| k == s)
            .map_or(0, |(_, v)| *v)
    }
    pub fn event(&self, s: &str) -> i64 {
        self.events
            .iter()
            .find(|(k, _)| k == s)
            .map_or(0, |(_, v)| *v)
    }
    pub fn total(&self) -> i64 {
        self.by_state.iter().map(|(_, v)| v).sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreBacklog {
    pub store: String,
    pub pending: i64,
    pub in_flight: i32,
}

pub(crate) fn status_col(row: &Row, idx: &str) -> Result<Status, StoreError> {
    let s: String = row.get(idx);
    Status::from_str(&s).map_err(|e| StoreError::Query(e.to_string()))
}

fn opt_status_col(row: &Row, idx: &str) -> Result<Option<Status>, StoreError> {
    let s: Option<String> = row.get(idx);
    s.map(|s| Status::from_str(&s).map_err(|e| StoreError::Query(e.to_string())))
        .transpose()
}

/// Enqueues inside the caller's transaction (or on any client), so an
/// application can enqueue atomically with its own rows: the outbox pattern.
/// Validation of the content is the caller's (see `courier-dispatch`).
pub async fn action_enqueue(
    client: &impl GenericClient,
    new: &NewAction,
) -> Result<Enqueued, EnqueueError> {
    client
        .execute(
            "INSERT INTO stores (store) VALUES ($1) ON CONFLICT (store) DO NOTHING",
            &[&new.store],
        )
        .await
        .map_err(StoreError::from)?;
    let uid = uuid::Uuid::new_v4();
    let row = client
        .query_opt(
            "INSERT INTO actions (uid, store, client_key, recipient, body)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (store, client_key) WHERE client_key IS NOT NULL DO NOTHING
             RETURNING id",
            &[&uid, &new.store, &new.key, &new.to, &new.body],
        )
        .await
        .map_err(StoreError::from)?;
    if let Some(row) = row {
        return Ok(Enqueued::Created(row.get(0)));
    }
    // A conflict is only possible with a client key.
    let row = client
        .query_one(
            "SELECT id, recipient, body FROM actions WHERE store = $1 AND client_key = $2",
            &[&new.store, &new.key],
        )
        .await
        .map_err(StoreError::from)?;
    let id: i64 = row.get(0);
    let (to, body): (String, String) = (row.get(1), row.get(2));
    if to == new.to && body == new.body {
        Ok(Enqueued::Existing(id))
    } else {
        Err(EnqueueError::KeyReused { existing_id: id })
    }
}

impl PgStore {
    /// Connects and applies migrations.
    pub async fn connect(cfg: &StoreConfig) -> Result<PgStore, StoreError> {
        let pg: tokio_postgres::Config = cfg
            .url
            .parse()
            .map_err(|e| StoreError::Query(format!("bad database URL: {e}")))?;
        let mut pg = pg;
        pg.connect_timeout(cfg.connect_timeout);
        let mgr = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(cfg.pool_size_max)
            .wait_timeout(Some(cfg.connect_timeout))
            .create_timeout(Some(cfg.connect_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Query(e.to_string()))?;
        let store = PgStore { pool };
        let mut client = store.pool.get().await?;
        if cfg.migrate {
            crate::migrate::run(&mut client).await?;
        }
        Ok(store)
    }

    /// A pooled connection, for callers that enqueue inside their own transaction.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    pub async fn action_enqueue(&self, new: &NewAction) -> Result<Enqueued, EnqueueError> {
        let mut client = self.pool.get().await.map_err(StoreError::from)?;
        let tx = client.transaction().await.map_err(StoreError::from)?;
        let out = action_enqueue(&*tx, new).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(out)
    }

    pub async fn action_get(&self, id: i64) -> Result<Option<ActionView>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                "SELECT a.id, a.store, a.client_key, a.recipient, a.state, a.epoch,
                        o.status, o.idem_key, coalesce(o.attempts, 0) AS attempts,
                        o.message_id, a.fail_reason,
                        to_char(a.enqueued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS enqueued_at
                 FROM actions a LEFT JOIN outbox o ON o.action_id = a.id
                 WHERE a.id = $1",
                &[&id],
            )
            .await?;
        row.map(|r| {
            Ok(ActionView {
                id: r.get("id"),
                store: r.get("store"),
                key: r.get("client_key"),
                to: r.get("recipient"),
                state: r.get("state"),
                epoch: r.get("epoch"),
                status: opt_status_col(&r, "status")?,
                idempotency_key: r.get("idem_key"),
                attempts: r.get("attempts"),
                message_id: r.get("message_id"),
                fail_reason: r.get("fail_reason"),
                enqueued_at: r.get("enqueued_at"),
            })
        })
        .transpose()
    }

    /// Claims up to `n` actions in one round trip: first actions whose lease
    /// ran out (at epoch + 1), then fresh ones in the chosen order. Safe under
    /// many concurrent claimers: store rows and action rows are locked with
    /// SKIP LOCKED, and a locked row is re-checked before it is taken. Writes
    /// no intent: the owner calls [`PgStore::outbox_intent`] next.
    pub async fn action_claim(
        &self,
        owner: &Arc<str>,
        n: u32,
        lease_ttl_ms: u64,
        store_in_flight_max: u32,
        mode: ClaimMode,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.claim(owner, n, lease_ttl_ms, store_in_flight_max, mode, false)
            .await
    }

    /// As [`PgStore::action_claim`], and in the same statement, so under the
    /// same compare-and-set, writes the send intent of every fresh action
    /// with its first attempt counted ([`Claimed::attempt_counted`]): the
    /// owner may send it at once, if its own lease check passes. A reclaimed
    /// action gets no new intent; its owner reads the one it has
    /// ([`PgStore::outbox_intent`]) and decides from it. One round trip
    /// instead of three per action.
    pub async fn action_claim_to_send(
        &self,
        owner: &Arc<str>,
        n: u32,
        lease_ttl_ms: u64,
        store_in_flight_max: u32,
        mode: ClaimMode,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.claim(owner, n, lease_ttl_ms, store_in_flight_max, mode, true)
            .await
    }

    async fn claim(
        &self,
        owner: &Arc<str>,
        n: u32,
        lease_ttl_ms: u64,
        store_in_flight_max: u32,
        mode: ClaimMode,
        write_intents: bool,
    ) -> Result<Vec<Claimed>, StoreError> {
        let client = self.pool.get().await?;
        let n = i64::from(n);
        let ttl = lease_ttl_ms as f64;
        let cap = i32::try_from(store_in_flight_max).unwrap_or(i32::MAX);
        let sql = claim_statement(mode);
        let rows = client
            .query(
                &client.prepare_cached(sql).await?,
                &[&owner.as_ref(), &n, &ttl, &cap, &write_intents],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| Claimed {
                lease: Lease {
                    action_id: r.get("id"),
                    owner: owner.clone(),
                    epoch: r.get("epoch"),
                },
                uid: r.get::<_, uuid::Uuid>("uid").simple().to_string(),
                store: r.get("store"),
                to: r.get("recipient"),
                body: r.get("body"),
                reclaimed: r.get("reclaimed"),
                attempt_counted: r.get("counted"),
            })
            .collect())
    }

    /// Writes the send intent: in one statement (so one transaction), the
    /// compare-and-set on `(owner, epoch)` and the insert of the outbox row
    /// with the action's stable key. If the intent exists (a reclaim), it is
    /// returned as it is now: this read happens after the claim committed, so
    /// it sees every attempt the previous owner counted.
    pub async fn outbox_intent(
        &self,
        lease: &Lease,
        key: &str,
    ) -> Result<Result<Intent, Fenced>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                &client
                    .prepare_cached(
                        "WITH cas AS (
                     SELECT id FROM actions
                     WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
                     FOR UPDATE
                 ), ins AS (
                     INSERT INTO outbox (action_id, idem_key, epoch_written)
                     SELECT id, $4, $3 FROM cas
                     ON CONFLICT (action_id) DO NOTHING
                     RETURNING idem_key, attempts, status
                 )
                 SELECT EXISTS (SELECT 1 FROM cas) AS held,
                        (SELECT count(*) FROM ins) AS written,
                        coalesce((SELECT idem_key FROM ins), o.idem_key) AS idem_key,
                        coalesce((SELECT attempts FROM ins), o.attempts) AS attempts,
                        coalesce((SELECT status FROM ins), o.status) AS status,
                        (SELECT epoch FROM actions WHERE id = $1) AS current_epoch
                 FROM (SELECT 1) one LEFT JOIN outbox o ON o.action_id = $1",
                    )
                    .await?,
                &[&lease.action_id, &lease.owner.as_ref(), &lease.epoch, &key],
            )
            .await?;
        let held: bool = row.get("held");
        if !held {
            return Ok(Err(Fenced {
                current_epoch: row.get("current_epoch"),
            }));
        }
        let written: i64 = row.get("written");
        let stored_key: String = row.get("idem_key");
        if stored_key != key {
            return Err(StoreError::Query(format!(
                "intent of action {} has key {stored_key}, expected {key}",
                lease.action_id
            )));
        }
        Ok(Ok(Intent {
            key: stored_key,
            attempts: u32::try_from(row.get::<_, i32>("attempts")).unwrap_or(0),
            status: status_col(&row, "status")?,
            written_now: written == 1,
        }))
    }

    /// Counts an attempt before the request leaves: fenced on `(owner, epoch)`
    /// and refused when the lease ends within `margin_ms` (database clock).
    /// The action row is locked first, so a reclaim cannot slip in between
    /// the check and the increment.
    pub async fn outbox_count_attempt(
        &self,
        lease: &Lease,
        margin_ms: u64,
    ) -> Result<Result<u32, AttemptRefused>, StoreError> {
        let client = self.pool.get().await?;
        let margin = margin_ms as f64;
        let row = client
            .query_one(
                &client
                    .prepare_cached(
                        "WITH fence AS (
                     SELECT id, lease_until > now() + $4 * interval '1 millisecond' AS roomy
                     FROM actions
                     WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
                     FOR UPDATE
                 ), upd AS (
                     UPDATE outbox SET attempts = attempts + 1
                     FROM fence WHERE outbox.action_id = fence.id AND fence.roomy
                     RETURNING outbox.attempts
                 )
                 SELECT (SELECT attempts FROM upd) AS attempts,
                        EXISTS (SELECT 1 FROM fence) AS held,
                        (SELECT epoch FROM actions WHERE id = $1) AS current_epoch",
                    )
                    .await?,
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &margin,
                ],
            )
            .await?;
        let attempts: Option<i32> = row.get("attempts");
        let held: bool = row.get("held");
        Ok(match (attempts, held) {
            (Some(a), _) => Ok(u32::try_from(a).unwrap_or(0)),
            (None, true) => Err(AttemptRefused::LeaseShort),
            (None, false) => Err(AttemptRefused::Fenced(Fenced {
                current_epoch: row.get("current_epoch"),
            })),
        })
    }

    /// Extends the leases this owner still holds. Of the ids asked about,
    /// `held` were extended and `fenced` now belong to another owner or
    /// epoch: their tasks must stop at once. An id in neither was settled or
    /// failed by this owner meanwhile (no longer claimed, still ours), or its
    /// row was locked at that moment (by this owner's own settle, or by a
    /// claimer re-checking an expired lease): a heartbeat never waits for a
    /// lock, and a lease it did not extend is simply not extended.
    pub async fn action_heartbeat(
        &self,
        owner: &str,
        held: &[(i64, i64)],
        lease_ttl_ms: u64,
    ) -> Result<Heartbeat, StoreError> {
        if held.is_empty() {
            return Ok(Heartbeat::default());
        }
        let client = self.pool.get().await?;
        let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, e)| *e).collect();
        let ttl = lease_ttl_ms as f64;
        let rows = client
            .query(
                &client.prepare_cached("WITH h AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS h(id, epoch)),
                 mine AS (
                     SELECT a.id FROM actions a JOIN h ON a.id = h.id AND a.epoch = h.epoch
                     WHERE a.owner = $3 AND a.state = 'claimed'
                     ORDER BY a.id
                     FOR UPDATE OF a SKIP LOCKED),
                 upd AS (
                     UPDATE actions a SET lease_until = now() + $4 * interval '1 millisecond'
                     FROM mine WHERE a.id = mine.id
                     RETURNING a.id)
                 SELECT h.id,
                        EXISTS (SELECT 1 FROM upd WHERE upd.id = h.id) AS extended,
                        coalesce(a.epoch = h.epoch AND a.owner = $3, false) AS ours
                 FROM h LEFT JOIN actions a ON a.id = h.id").await?,
                &[&ids, &epochs, &owner, &ttl],
            )
            .await?;
        let mut out = Heartbeat::default();
        for r in &rows {
            let id: i64 = r.get("id");
            if r.get::<_, bool>("extended") {
                out.held.push(id);
            } else if !r.get::<_, bool>("ours") {
                out.fenced.push(id);
            }
        }
        Ok(out)
    }

    /// Records what the provider said (from a send or a lookup, by the owner),
    /// then settles: the action is dispatched (or done, if the status is
    /// final) and its lease released. Fenced.
    pub async fn action_settle(
        &self,
        lease: &Lease,
        report: Status,
        message_id: Option<&str>,
        from_lookup: bool,
        final_overdue_ms: u64,
    ) -> Result<Result<Settled, Fenced>, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let fence = tx
            .query_opt(
                &tx.prepare_cached(
                    "SELECT store FROM actions
                 WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
                 FOR UPDATE",
                )
                .await?,
                &[&lease.action_id, &lease.owner.as_ref(), &lease.epoch],
            )
            .await?;
        let Some(fence) = fence else {
            drop(tx);
            return self.settle_refused(lease).await;
        };
        let store: String = fence.get(0);
        let row = tx
            .query_one(
                &tx.prepare_cached(
                    "SELECT status, conflict FROM outbox WHERE action_id = $1 FOR UPDATE",
                )
                .await?,
                &[&lease.action_id],
            )
            .await?;
        let current = status_col(&row, "status")?;
        let conflict: bool = row.get("conflict");
        let (new, how) = fold_report(current, conflict, report, from_lookup);
        let overdue = final_overdue_ms as f64;
        tx.execute(
            &tx.prepare_cached("UPDATE outbox SET status = $2,
                    message_id = coalesce(message_id, $3),
                    conflict = $4,
                    accepted_at = coalesce(accepted_at, now()),
                    final_at = CASE WHEN $2 IN ('delivered', 'failed') THEN coalesce(final_at, now()) END,
                    next_check_at = CASE WHEN $4 THEN now()
                                         WHEN $2 IN ('delivered', 'failed') THEN NULL
                                         ELSE now() + $5 * interval '1 millisecond' END
             WHERE action_id = $1").await?,
            &[
                &lease.action_id,
                &new.status.as_str(),
                &message_id,
                &new.conflict,
                &overdue,
            ],
        )
        .await?;
        let done = new.status.is_final() && !new.conflict;
        tx.execute(
            &tx.prepare_cached(
                "UPDATE actions SET state = CASE WHEN $2 THEN 'done' ELSE 'dispatched' END,
                    lease_until = NULL, dispatched_at = now(),
                    done_at = CASE WHEN $2 THEN now() END
             WHERE id = $1",
            )
            .await?,
            &[&lease.action_id, &done],
        )
        .await?;
        tx.execute(
            &tx.prepare_cached("INSERT INTO store_releases (store, n) VALUES ($1, 1)")
                .await?,
            &[&store],
        )
        .await?;
        record_merge_events(&*tx, lease.action_id, how, "settle").await?;
        tx.commit().await?;
        Ok(Ok(Settled {
            status: new.status,
            merge: how,
        }))
    }

    /// After a refused settle: was it ours already (a retry after a commit
    /// whose answer was lost) or is it fenced?
    pub(crate) async fn settle_refused(
        &self,
        lease: &Lease,
    ) -> Result<Result<Settled, Fenced>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                "SELECT a.owner, a.epoch, a.state, o.status
                 FROM actions a LEFT JOIN outbox o ON o.action_id = a.id WHERE a.id = $1",
                &[&lease.action_id],
            )
            .await?;
        let Some(row) = row else {
            return Ok(Err(Fenced {
                current_epoch: None,
            }));
        };
        let owner: Option<String> = row.get("owner");
        let epoch: i64 = row.get("epoch");
        let state: String = row.get("state");
        if owner.as_deref() == Some(lease.owner.as_ref())
            && epoch == lease.epoch
            && (state == "dispatched" || state == "done")
        {
            let status = opt_status_col(&row, "status")?.unwrap_or(Status::Accepted);
            return Ok(Ok(Settled {
                status,
                merge: Merge::Same,
            }));
        }
        self.event_record("fenced", Some(lease.action_id), "settle")
            .await?;
        Ok(Err(Fenced {
            current_epoch: Some(epoch),
        }))
    }

    /// Marks a claimed action failed: the provider refused it (a bug or a bad
    /// action). Never followed by a resend with a new key. Fenced.
    pub async fn action_fail(
        &self,
        lease: &Lease,
        reason: &str,
    ) -> Result<Result<(), Fenced>, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let row = tx
            .query_opt(
                "UPDATE actions SET state = 'failed', lease_until = NULL, fail_reason = $4,
                        done_at = now()
                 WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
                 RETURNING store",
                &[
                    &lease.action_id,
                    &lease.owner.as_ref(),
                    &lease.epoch,
                    &reason,
                ],
            )
            .await?;
        let Some(row) = row else {
            drop(tx);
            return Ok(Err(self.fenced_now(lease, "fail").await?));
        };
        let store: String = row.get(0);
        tx.execute(
            "INSERT INTO store_releases (store, n) VALUES ($1, 1)",
            &[&store],
        )
        .await?;
        tx.execute(
            "INSERT INTO events (kind, action_id, detail) VALUES ('rejected', $1, $2)",
            &[&lease.action_id, &reason],
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Records a refused fenced write and returns the current epoch.
    pub async fn fenced_now(&self, lease: &Lease, op: &str) -> Result<Fenced, StoreError> {
        let client = self.pool.get().await?;
        let epoch: Option<i64> = client
            .query_opt(
                "SELECT epoch FROM actions WHERE id = $1",
                &[&lease.action_id],
            )
            .await?
            .map(|r| r.get(0));
        self.event_record("fenced", Some(lease.action_id), op)
            .await?;
        Ok(Fenced {
            current_epoch: epoch,
        })
    }

    /// Merges a webhook: the event id is recorded in the same transaction as
    /// the merge, so a duplicate is a no-op.
    pub async fn webhook_merge(
        &self,
        event_id: &str,
        key: &str,
        status: Status,
        message_id: &str,
    ) -> Result<MergeOutcome, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let fresh = tx
            .execute(
                "INSERT INTO webhook_events (event_id, idem_key, status, outcome)
                 VALUES ($1, $2, $3, 'pending') ON CONFLICT (event_id) DO NOTHING",
                &[&event_id, &key, &status.as_str()],
            )
            .await?;
        if fresh == 0 {
            tx.execute(
                "INSERT INTO events (kind, detail) VALUES ('duplicate_webhook', $1)",
                &[&event_id],
            )
            .await?;
            tx.commit().await?;
            return Ok(MergeOutcome::Duplicate);
        }
        let outcome = merge_unleased(&*tx, key, status, Some(message_id), false).await?;
        if outcome == MergeOutcome::UnknownKey {
            // Roll back the event id too: a later delivery may find the key.
            drop(tx);
            return Ok(outcome);
        }
        let label = match outcome {
            MergeOutcome::Applied(how) => crate::batch::merge_label(how),
            MergeOutcome::Duplicate | MergeOutcome::UnknownKey => "other",
        };
        tx.execute(
            "UPDATE webhook_events SET outcome = $2 WHERE event_id = $1",
            &[&event_id, &label],
        )
        .await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// Merges what a reconciling lookup found (no lease: forward-only, and the
    /// lookup's final word settles a recorded conflict).
    pub async fn lookup_merge(
        &self,
        key: &str,
        status: Status,
        message_id: &str,
    ) -> Result<MergeOutcome, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let out = merge_unleased(&*tx, key, status, Some(message_id), true).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Picks actions due for a reconciling lookup (final status overdue, or a
    /// conflict) and pushes their next check out, so concurrent reconcilers
    /// take different ones.
    pub async fn outbox_due_checks(
        &self,
        n: u32,
        recheck_ms: u64,
    ) -> Result<Vec<DueCheck>, StoreError> {
        let client = self.pool.get().await?;
        let recheck = recheck_ms as f64;
        let rows = client
            .query(
                "UPDATE outbox o SET next_check_at = now() + $2 * interval '1 millisecond',
                        lookups = o.lookups + 1
                 WHERE o.action_id IN (
                     SELECT o2.action_id FROM outbox o2 JOIN actions a ON a.id = o2.action_id
                     WHERE o2.next_check_at <= now() AND (a.state = 'dispatched' OR o2.conflict)
                     ORDER BY o2.next_check_at
                     LIMIT $1
                     FOR UPDATE OF o2 SKIP LOCKED)
                 RETURNING o.action_id, o.idem_key",
                &[&i64::from(n), &recheck],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| DueCheck {
                action_id: r.get(0),
                key: r.get(1),
            })
            .collect())
    }

    pub async fn event_record(
        &self,
        kind: &str,
        action_id: Option<i64>,
        detail: &str,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                "INSERT INTO events (kind, action_id, detail) VALUES ($1, $2, $3)",
                &[&kind, &action_id, &detail],
            )
            .await?;
        Ok(())
    }

    /// Open intents older than `age_s`: past the provider's key retention a
    /// resend could be a second message, so these are reported.
    pub async fn intents_older_than(&self, age_s: u64) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        let age = age_s as f64;
        let row = client
            .query_one(
                "SELECT count(*) FROM outbox
                 WHERE status NOT IN ('delivered', 'failed')
                   AND created_at < now() - $1 * interval '1 second'",
                &[&age],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Owners holding claimed actions, most first.
    pub async fn owners_holding(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT owner, count(*) FROM actions WHERE state = 'claimed' AND lease_until > now()
                 GROUP BY owner ORDER BY count(*) DESC",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Every action with its key and final status, for the verifier.
    pub async fn action_outcomes(&self) -> Result<Vec<ActionOutcome>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT a.id, a.uid, a.state,
                        CASE WHEN o.status IN ('delivered', 'failed') AND NOT o.conflict
                             THEN o.status END AS final_status
                 FROM actions a LEFT JOIN outbox o ON o.action_id = a.id ORDER BY a.id",
                &[],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ActionOutcome {
                    action_id: r.get("id"),
                    uid: r.get::<_, uuid::Uuid>("uid").simple().to_string(),
                    state: r.get("state"),
                    final_status: opt_status_col(r, "final_status")?,
                })
            })
            .collect()
    }

    /// Counts by state and status, events by kind, per-store backlog and the
    /// oldest open intent.
    pub async fn summary(&self, intent_alert_s: u64) -> Result<Summary, StoreError> {
        let client = self.pool.get().await?;
        let pairs = |rows: Vec<Row>| -> Vec<(String, i64)> {
            rows.iter().map(|r| (r.get(0), r.get(1))).collect()
        };
        let by_state = pairs(
            client
                .query(
                    "SELECT state, count(*) FROM actions GROUP BY state ORDER BY state",
                    &[],
                )
                .await?,
        );
        let by_status = pairs(
            client
                .query(
                    "SELECT status, count(*) FROM outbox GROUP BY status ORDER BY status",
                    &[],
                )
                .await?,
        );
        let events = pairs(
            client
                .query(
                    "SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind",
                    &[],
                )
                .await?,
        );
        let stores = client
            .query(
                "SELECT s.store, s.in_flight,
                        (SELECT count(*) FROM actions a WHERE a.store = s.store AND a.state = 'pending') AS pending
                 FROM store_in_flight s ORDER BY pending DESC, s.in_flight DESC, s.store",
                &[],
            )
            .await?
            .iter()
            .map(|r| StoreBacklog {
                store: r.get(0),
                in_flight: r.get(1),
                pending: r.get(2),
            })
            .collect();
        let alert = intent_alert_s as f64;
        let row = client
            .query_one(
                "SELECT extract(epoch FROM now() - min(created_at))::float8,
                        count(*) FILTER (WHERE created_at < now() - $1 * interval '1 second'),
                        coalesce(sum(attempts), 0)::bigint, coalesce(sum(lookups), 0)::bigint
                 FROM outbox WHERE status NOT IN ('delivered', 'failed')",
                &[&alert],
            )
            .await?;
        let totals = client
            .query_one(
                "SELECT coalesce(sum(attempts), 0)::bigint, coalesce(sum(lookups), 0)::bigint FROM outbox",
                &[],
            )
            .await?;
        Ok(Summary {
            by_state,
            by_status,
            events,
            stores,
            oldest_open_intent_s: row.get(0),
            intents_older_than_alert: row.get(1),
            attempts_total: totals.get(0),
            lookups_total: totals.get(1),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Folded {
    pub(crate) status: Status,
    pub(crate) conflict: bool,
}

/// Folds one report into the current status and conflict flag.
pub(crate) fn fold_report(
    current: Status,
    conflict: bool,
    report: Status,
    from_lookup: bool,
) -> (Folded, Merge) {
    if from_lookup && conflict && report.is_final() {
        let status = merge_lookup(current, conflict, report);
        return (
            Folded {
                status,
                conflict: false,
            },
            Merge::Advance(status),
        );
    }
    let how = merge(current, report);
    let status = match how {
        Merge::Advance(s) => s,
        _ => current,
    };
    (
        Folded {
            status,
            conflict: conflict || how == Merge::Conflict,
        },
        how,
    )
}

async fn record_merge_events(
    tx: &impl GenericClient,
    action_id: i64,
    how: Merge,
    source: &str,
) -> Result<(), StoreError> {
    let Some(kind) = crate::batch::merge_event_kind(how) else {
        return Ok(());
    };
    tx.execute(
        "INSERT INTO events (kind, action_id, detail) VALUES ($1, $2, $3)",
        &[&kind, &action_id, &source],
    )
    .await?;
    Ok(())
}

/// The merge of a report that carries no lease (webhook, reconciling lookup):
/// outbox row first, then the action (dispatched -> done when final).
async fn merge_unleased(
    tx: &impl GenericClient,
    key: &str,
    report: Status,
    message_id: Option<&str>,
    from_lookup: bool,
) -> Result<MergeOutcome, StoreError> {
    let row = tx
        .query_opt(
            "SELECT action_id, status, conflict FROM outbox WHERE idem_key = $1 FOR UPDATE",
            &[&key],
        )
        .await?;
    let Some(row) = row else {
        return Ok(MergeOutcome::UnknownKey);
    };
    let action_id: i64 = row.get("action_id");
    let current = status_col(&row, "status")?;
    let conflict: bool = row.get("conflict");
    let (new, how) = fold_report(current, conflict, report, from_lookup);
    if new.status != current || new.conflict != conflict {
        tx.execute(
            "UPDATE outbox SET status = $2, conflict = $3,
                    message_id = coalesce(message_id, $4),
                    accepted_at = coalesce(accepted_at, now()),
                    final_at = CASE WHEN $2 IN ('delivered', 'failed') THEN coalesce(final_at, now()) END,
                    next_check_at = CASE WHEN $3 THEN now()
                                         WHEN $2 IN ('delivered', 'failed') THEN NULL
                                         ELSE next_check_at END
             WHERE action_id = $1",
            &[&action_id, &new.status.as_str(), &new.conflict, &message_id],
        )
        .await?;
    }
    if new.status.is_final() && !new.conflict {
        tx.execute(
            "UPDATE actions SET state = 'done', done_at = now()
             WHERE id = $1 AND state = 'dispatched'",
            &[&action_id],
        )
        .await?;
    }
    record_merge_events(
        tx,
        action_id,
        how,
        if from_lookup { "lookup" } else { "webhook" },
    )
    .await?;
    Ok(MergeOutcome::Applied(how))
}

/// The text of a claim statement, so tests can check its plans (parameters:
/// $1 owner, $2 batch size, $3 lease ttl ms, $4 per-store cap, $5 write
/// intents). Not an API: run claims with [`PgStore::action_claim`] and
/// [`PgStore::action_claim_to_send`].
#[doc(hidden)]
pub fn claim_statement(mode: ClaimMode) -> &'static str {
    match mode {
        ClaimMode::Fair => CLAIM_FAIR,
        ClaimMode::Fifo => CLAIM_FIFO,
    }
}

/// The head of both claims: actions whose lease ran out, re-taken at epoch + 1
/// (SKIP LOCKED: a claim never waits for a lock).
macro_rules! claim_reclaimed {
    () => {
        "
WITH reclaimed AS (
    UPDATE actions a
    SET owner = $1, epoch = a.epoch + 1,
        lease_until = now() + $3 * interval '1 millisecond', claimed_at = now()
    WHERE a.id IN (
        SELECT id FROM actions
        WHERE state = 'claimed' AND lease_until < now()
        ORDER BY lease_until
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
    RETURNING a.id, a.uid, a.store, a.recipient, a.body, a.epoch, true AS reclaimed
),"
    };
}

/// The tail of both claims: take the `chosen` pending actions, count them
/// against their stores, and, when $5, write each fresh action's send intent
/// with its first attempt counted, in this same statement (so under the very
/// compare-and-set that proves the claim). The key is `courier-` and the uid
/// in simple form, as `courier_core::action_key` makes it (a test checks both
/// agree). A reclaimed action keeps the intent it has: its owner reads it and
/// decides (a counted attempt means a lookup first). Each claim defines
/// `chosen`, `released` (the store releases it folds) and `locked_stores`
/// (the store rows it holds, a superset of the chosen actions' stores).
macro_rules! claim_tail {
    () => {
        "
claimed AS (
    UPDATE actions a
    SET state = 'claimed', owner = $1, epoch = a.epoch + 1,
        lease_until = now() + $3 * interval '1 millisecond', claimed_at = now()
    FROM chosen c WHERE a.id = c.id
    RETURNING a.id, a.uid, a.store, a.recipient, a.body, a.epoch, false AS reclaimed
),
served AS (
    UPDATE stores st
    SET in_flight = st.in_flight + coalesce(c.n, 0) - coalesce(r.n, 0),
        last_served_at = CASE WHEN c.n > 0 THEN clock_timestamp() ELSE st.last_served_at END
    FROM locked_stores u
    LEFT JOIN (SELECT store, count(*)::int AS n FROM chosen GROUP BY store) c ON c.store = u.store
    LEFT JOIN (SELECT store, sum(n)::int AS n FROM released GROUP BY store) r ON r.store = u.store
    WHERE st.store = u.store AND (c.n IS NOT NULL OR r.n IS NOT NULL)
),
intents AS (
    INSERT INTO outbox (action_id, idem_key, epoch_written, attempts)
    SELECT id, 'courier-' || replace(uid::text, '-', ''), epoch, 1 FROM claimed WHERE $5
    ON CONFLICT (action_id) DO NOTHING
    RETURNING action_id
)
SELECT r.*, false AS counted FROM reclaimed r
UNION ALL
SELECT c.*, EXISTS (SELECT 1 FROM intents i WHERE i.action_id = c.id) AS counted FROM claimed c"
    };
}

/// Store rows are locked FOR NO KEY UPDATE: enough to serialize claims of
/// one store, and no obstacle to an enqueue's foreign-key check.
///
/// Fair claim: expired leases first, then the least recently served stores
/// with work and room under the cap, one action from each in turn, oldest
/// first within a store. Each store locks at most its share of the batch
/// (the batch over the number of stores, rounded up), so a claim locks about
/// as many action rows as it takes. $1 owner, $2 batch size, $3 lease ttl
/// ms, $4 cap, $5 write intents.
const CLAIM_FAIR: &str = concat!(
    claim_reclaimed!(),
    "
s AS (
    SELECT st.store, st.in_flight, st.last_served_at
    FROM stores st
    -- One probe of the per-store pending index per store (a LIMIT keeps
    -- the planner from scanning every action to find the stores with work).
    -- The FIFO index's predicate keeps it out of reach of these probes, so
    -- that no statistics can lead the planner to walk the whole pending
    -- queue once per store (migration 0003, tests/plans.rs).
    CROSS JOIN LATERAL (
        SELECT 1 FROM actions p WHERE p.store = st.store AND p.state = 'pending'
        ORDER BY p.id LIMIT 1) w
    LEFT JOIN (SELECT store, sum(n) AS n FROM store_releases GROUP BY store) r
        ON r.store = st.store
    WHERE st.in_flight - coalesce(r.n, 0) < $4::int
    ORDER BY st.last_served_at NULLS FIRST, st.store
    LIMIT $2
    FOR NO KEY UPDATE OF st SKIP LOCKED
),
released AS (
    DELETE FROM store_releases r USING s WHERE r.store = s.store
    RETURNING r.store, r.n
),
-- The store rows this claim holds: it counts only against them.
locked_stores AS (SELECT store FROM s),
ranked_stores AS (
    SELECT s.store,
           s.in_flight - coalesce((SELECT sum(x.n) FROM released x WHERE x.store = s.store), 0)
               AS in_flight,
           row_number() OVER (ORDER BY s.last_served_at NULLS FIRST, s.store) AS store_rank,
           count(*) OVER () AS k
    FROM s
),
locked AS (
    SELECT rs.store, rs.store_rank, p.id
    FROM ranked_stores rs
    CROSS JOIN LATERAL (
        SELECT a.id FROM actions a
        WHERE a.store = rs.store AND a.state = 'pending'
        ORDER BY a.id
        LIMIT GREATEST(LEAST($4 - rs.in_flight, ($2 + rs.k - 1) / rs.k), 0)
        FOR UPDATE SKIP LOCKED) p
),
chosen AS (
    SELECT id, store FROM (
        SELECT id, store, store_rank,
               row_number() OVER (PARTITION BY store ORDER BY id) AS turn
        FROM locked) t
    ORDER BY turn, store_rank
    LIMIT GREATEST($2 - (SELECT count(*) FROM reclaimed), 0)
),",
    claim_tail!()
);

/// FIFO claim, for comparison: expired leases first, then the oldest pending
/// actions of all stores. `store > ''` (always true) matches the predicate
/// of its index, which only this claim may use (migration 0003). The
/// per-store cap does not apply ($4 is only referenced so both claims take
/// the same parameters). Unlike the fair claim, it waits for the store rows
/// of what it took (to count them).
const CLAIM_FIFO: &str = concat!(
    claim_reclaimed!(),
    "
chosen AS (
    SELECT a.id, a.store FROM actions a
    WHERE a.state = 'pending' AND a.store > '' AND $4 >= 0
    ORDER BY a.id
    LIMIT GREATEST($2 - (SELECT count(*) FROM reclaimed), 0)
    FOR UPDATE SKIP LOCKED
),
-- The chosen actions' store rows, locked in name order (so two FIFO claims
-- cannot wait on each other in a cycle) before their releases are folded.
fifo_stores AS (
    SELECT st.store FROM stores st WHERE st.store IN (SELECT store FROM chosen)
    ORDER BY st.store
    FOR NO KEY UPDATE
),
released AS (
    DELETE FROM store_releases r USING fifo_stores f WHERE r.store = f.store
    RETURNING r.store, r.n
),
locked_stores AS (SELECT store FROM fifo_stores),",
    claim_tail!()
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_follows_the_core_merge() {
        let (f, how) = fold_report(Status::Sent, false, Status::Accepted, false);
        assert_eq!(
            (f.status, f.conflict, how),
            (Status::Sent, false, Merge::Backward)
        );
        let (f, how) = fold_report(Status::Delivered, false, Status::Failed, false);
        assert_eq!(
            (f.status, f.conflict, how),
            (Status::Delivered, true, Merge::Conflict)
        );
        // A lookup settles a conflict.
        let (f, _) = fold_report(Status::Delivered, true, Status::Failed, true);
        assert_eq!((f.status, f.conflict), (Status::Failed, false));
        // A webhook does not.
        let (f, _) = fold_report(Status::Delivered, true, Status::Failed, false);
        assert_eq!((f.status, f.conflict), (Status::Delivered, true));
    }
}
