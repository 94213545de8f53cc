//! Group commit: many callers' writes in one transaction.
//!
//! [`GroupCommit`] collects requests from concurrent tasks and runs them as
//! one batch; each caller gets its own answer after the batch committed.
//! The batch writes are [`PgStore::actions_settle_batch`] (a worker's settles)
//! and [`PgStore::webhooks_merge_batch`] (the webhook API's merges): the same
//! checks and the same merge as their one-at-a-time forms, fewer commits.
//!
//! # Invariants
//! - A caller is answered only after the transaction holding its write
//!   committed (or with the error that ended it): an answer never runs ahead
//!   of the database.
//! - A batch answers every request, in order, exactly once.
//! - Waiting locks are taken in one order: action rows by id, then their
//!   outbox rows (settles); outbox rows by action id, then their action rows
//!   (merges). A settle takes no store row lock: it appends a release that a
//!   later claim folds in (migration 0002). Claims and heartbeats take only
//!   SKIP LOCKED locks and never wait. So no two batches wait in a cycle.

use crate::queries::{fold_report, status_col, Fenced, Lease, MergeOutcome, PgStore, Settled};
use crate::StoreError;
use courier_core::status::Merge;
use courier_core::Status;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};

type Job<Req, Resp> = (Req, oneshot::Sender<Result<Resp, StoreError>>);

/// A batcher of writes. Requests that arrive while a batch is running form
/// the next one, so batches grow with load and a lone request waits for no
/// one. At most `parallel` batches run at once (their commits overlap).
pub struct GroupCommit<Req, Resp> {
    tx: mpsc::Sender<Job<Req, Resp>>,
}

impl<Req, Resp> Clone for GroupCommit<Req, Resp> {
    fn clone(&self) -> Self {
        GroupCommit {
            tx: self.tx.clone(),
        }
    }
}

impl<Req: Send + 'static, Resp: Send + 'static> GroupCommit<Req, Resp> {
    /// Starts the batcher on the current tokio runtime. `run` must answer
    /// every request of its batch, in order. The batcher stops when the last
    /// handle is dropped.
    pub fn start<F, Fut>(batch_max: usize, parallel: usize, run: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Resp>, StoreError>> + Send + 'static,
    {
        let batch_max = batch_max.max(1);
        let parallel = parallel.max(1);
        let (tx, mut rx) = mpsc::channel::<Job<Req, Resp>>(batch_max * parallel * 2);
        let run = Arc::new(run);
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(parallel));
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let Some(first) = rx.recv().await else {
                    return;
                };
                let mut jobs = vec![first];
                while jobs.len() < batch_max {
                    match rx.try_recv() {
                        Ok(job) => jobs.push(job),
                        Err(_) => break,
                    }
                }
                let run = run.clone();
                tokio::spawn(async move {
                    let (reqs, replies): (Vec<Req>, Vec<_>) = jobs.into_iter().unzip();
                    let n = reqs.len();
                    match run(reqs).await {
                        Ok(resps) => {
                            let got = resps.len();
                            let mut resps = resps.into_iter();
                            for reply in replies {
                                let answer = resps.next().ok_or_else(|| {
                                    StoreError::Query(format!(
                                        "a batch of {n} answered {got} requests"
                                    ))
                                });
                                let _ = reply.send(answer);
                            }
                        }
                        Err(e) => {
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                    }
                    drop(slot);
                });
            }
        });
        GroupCommit { tx }
    }

    /// Adds `req` to the next batch and waits until that batch committed.
    pub async fn call(&self, req: Req) -> Result<Resp, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((req, reply))
            .await
            .map_err(|_| StoreError::Unavailable("the batcher has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the batch ended without an answer".into()))?
    }
}

/// One settle of a batch: what [`PgStore::action_settle`] takes.
#[derive(Debug, Clone)]
pub struct SettleReq {
    pub lease: Lease,
    pub report: Status,
    pub message_id: Option<String>,
    pub from_lookup: bool,
}

/// One webhook of a batch, already validated and its signature checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookIn {
    pub event_id: String,
    pub key: String,
    pub status: Status,
    pub message_id: String,
}

impl PgStore {
    /// Settles many claimed actions in one transaction: per action exactly
    /// what [`PgStore::action_settle`] does (fenced on owner and epoch, the
    /// report folded forward-only into the outbox row, the lease released,
    /// the store's in-flight count lowered, backward and conflicting reports
    /// recorded). An action no longer held gets what `action_settle` answers
    /// for it (its own earlier settle, or [`Fenced`]). If the batch fails for
    /// a reason other than the database being away, each settle is written on
    /// its own, so one bad request cannot hold back the others: hence an
    /// answer per request.
    #[allow(clippy::type_complexity)]
    pub async fn actions_settle_batch(
        &self,
        reqs: &[SettleReq],
        final_overdue_ms: u64,
    ) -> Result<Vec<Result<Result<Settled, Fenced>, StoreError>>, StoreError> {
        match self.settle_together(reqs, final_overdue_ms).await {
            Ok(v) => Ok(v.into_iter().map(Ok).collect()),
            Err(StoreError::Query(e)) if reqs.len() > 1 => {
                tracing::warn!(error = %e, n = reqs.len(), "settle batch failed; settling one by one");
                let mut out = Vec::with_capacity(reqs.len());
                for r in reqs {
                    out.push(
                        self.action_settle(
                            &r.lease,
                            r.report,
                            r.message_id.as_deref(),
                            r.from_lookup,
                            final_overdue_ms,
                        )
                        .await,
                    );
                }
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    async fn settle_together(
        &self,
        reqs: &[SettleReq],
        final_overdue_ms: u64,
    ) -> Result<Vec<Result<Settled, Fenced>>, StoreError> {
        if reqs.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = reqs.iter().map(|r| r.lease.action_id).collect();
        let epochs: Vec<i64> = reqs.iter().map(|r| r.lease.epoch).collect();
        let owners: Vec<&str> = reqs.iter().map(|r| r.lease.owner.as_ref()).collect();

        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let held = tx
            .query(
                &tx.prepare_cached(
                    "SELECT a.id, a.store, o.status, o.conflict
                 FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS i(id, epoch, owner)
                 JOIN actions a ON a.id = i.id AND a.epoch = i.epoch AND a.owner = i.owner
                 JOIN outbox o ON o.action_id = a.id
                 WHERE a.state = 'claimed'
                 ORDER BY a.id
                 FOR UPDATE OF a, o",
                )
                .await?,
                &[&ids, &epochs, &owners],
            )
            .await?;
        let mut current: HashMap<i64, (String, Status, bool)> = HashMap::new();
        for r in &held {
            current.insert(
                r.get("id"),
                (r.get("store"), status_col(r, "status")?, r.get("conflict")),
            );
        }

        let mut u_ids = Vec::new();
        let mut u_status = Vec::new();
        let mut u_msg: Vec<Option<&str>> = Vec::new();
        let mut u_conflict = Vec::new();
        let mut u_done = Vec::new();
        let mut u_store = Vec::new();
        let (mut e_kind, mut e_id, mut e_detail) = (Vec::new(), Vec::new(), Vec::new());
        let mut answers: Vec<Option<Settled>> = Vec::with_capacity(reqs.len());
        for r in reqs {
            let Some((store, status, conflict)) = current.remove(&r.lease.action_id) else {
                answers.push(None);
                continue;
            };
            let (new, how) = fold_report(status, conflict, r.report, r.from_lookup);
            u_ids.push(r.lease.action_id);
            u_status.push(new.status.as_str());
            u_msg.push(r.message_id.as_deref());
            u_conflict.push(new.conflict);
            u_done.push(new.status.is_final() && !new.conflict);
            u_store.push(store);
            if let Some(kind) = merge_event_kind(how) {
                e_kind.push(kind);
                e_id.push(r.lease.action_id);
                e_detail.push("settle");
            }
            answers.push(Some(Settled {
                status: new.status,
                merge: how,
            }));
        }
        if !u_ids.is_empty() {
            let overdue = final_overdue_ms as f64;
            tx.execute(
                &tx.prepare_cached(
                    "WITH u AS (
                     SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bool[],
                                          $5::bool[], $6::text[])
                         AS u(id, status, message_id, conflict, done, store)
                 ), o AS (
                     UPDATE outbox o SET status = u.status,
                            message_id = coalesce(o.message_id, u.message_id),
                            conflict = u.conflict,
                            accepted_at = coalesce(o.accepted_at, now()),
                            final_at = CASE WHEN u.status IN ('delivered', 'failed')
                                            THEN coalesce(o.final_at, now()) END,
                            next_check_at = CASE WHEN u.conflict THEN now()
                                                 WHEN u.status IN ('delivered', 'failed') THEN NULL
                                                 ELSE now() + $7 * interval '1 millisecond' END
                     FROM u WHERE o.action_id = u.id
                 ), a AS (
                     UPDATE actions a
                     SET state = CASE WHEN u.done THEN 'done' ELSE 'dispatched' END,
                         lease_until = NULL, dispatched_at = now(),
                         done_at = CASE WHEN u.done THEN now() END
                     FROM u WHERE a.id = u.id
                 ), s AS (
                     INSERT INTO store_releases (store, n)
                     SELECT store, count(*)::int FROM u GROUP BY store
                 ), e AS (
                     INSERT INTO events (kind, action_id, detail)
                     SELECT * FROM unnest($8::text[], $9::bigint[], $10::text[])
                 )
                 SELECT 1",
                )
                .await?,
                &[
                    &u_ids,
                    &u_status,
                    &u_msg,
                    &u_conflict,
                    &u_done,
                    &u_store,
                    &overdue,
                    &e_kind,
                    &e_id,
                    &e_detail,
                ],
            )
            .await?;
        }
        tx.commit().await?;
        drop(client);

        // Those not held: a retry after a lost commit answer, or fenced.
        let mut out = Vec::with_capacity(reqs.len());
        for (r, a) in reqs.iter().zip(answers) {
            out.push(match a {
                Some(s) => Ok(s),
                None => self.settle_refused(&r.lease).await?,
            });
        }
        Ok(out)
    }

    /// Merges many webhooks in one transaction, each exactly as
    /// [`PgStore::webhook_merge`] would one after another in this order: its
    /// event id recorded with its merge, a repeated id a no-op (also within
    /// the batch), an unknown key recorded nowhere. If the batch fails for a
    /// reason other than the database being away, each webhook is merged on
    /// its own, so one bad event cannot hold back the others: hence an answer
    /// per event. A batch where one event id comes with two different keys
    /// (a provider bug) is merged one by one too, in order.
    pub async fn webhooks_merge_batch(
        &self,
        events: &[WebhookIn],
    ) -> Result<Vec<Result<MergeOutcome, StoreError>>, StoreError> {
        let mut keys_of: HashMap<&str, &str> = HashMap::new();
        let same_key_per_id = events
            .iter()
            .all(|e| *keys_of.entry(e.event_id.as_str()).or_insert(e.key.as_str()) == e.key);
        let together = if same_key_per_id {
            self.webhooks_merge_together(events).await
        } else {
            Err(StoreError::Query(
                "an event id came with two different keys".into(),
            ))
        };
        match together {
            Ok(v) => Ok(v.into_iter().map(Ok).collect()),
            Err(StoreError::Query(e)) if events.len() > 1 => {
                tracing::warn!(error = %e, n = events.len(), "webhook batch failed; merging one by one");
                let mut out = Vec::with_capacity(events.len());
                for ev in events {
                    out.push(
                        self.webhook_merge(&ev.event_id, &ev.key, ev.status, &ev.message_id)
                            .await,
                    );
                }
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    async fn webhooks_merge_together(
        &self,
        events: &[WebhookIn],
    ) -> Result<Vec<MergeOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys: Vec<&str> = events.iter().map(|e| e.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let rows = tx
            .query(
                &tx.prepare_cached(
                    "SELECT action_id, idem_key, status, conflict FROM outbox
                 WHERE idem_key = ANY($1::text[]) ORDER BY action_id FOR UPDATE",
                )
                .await?,
                &[&keys],
            )
            .await?;
        struct Row {
            action_id: i64,
            status: Status,
            conflict: bool,
            changed: bool,
            ever_done: bool,
            message_id: Option<String>,
        }
        let mut known: HashMap<String, Row> = HashMap::new();
        for r in &rows {
            known.insert(
                r.get("idem_key"),
                Row {
                    action_id: r.get("action_id"),
                    status: status_col(r, "status")?,
                    conflict: r.get("conflict"),
                    changed: false,
                    ever_done: false,
                    message_id: None,
                },
            );
        }

        // The first occurrence of each event id in the batch is a candidate;
        // later ones share its fate (recorded: duplicate).
        let mut first_at: HashMap<&str, usize> = HashMap::new();
        let mut candidates_known: Vec<&str> = Vec::new();
        let mut candidates_unknown: Vec<&str> = Vec::new();
        let (mut c_keys, mut c_status) = (Vec::new(), Vec::new());
        for (i, ev) in events.iter().enumerate() {
            if first_at.contains_key(ev.event_id.as_str()) {
                continue;
            }
            first_at.insert(ev.event_id.as_str(), i);
            if known.contains_key(&ev.key) {
                candidates_known.push(ev.event_id.as_str());
                c_keys.push(ev.key.as_str());
                c_status.push(ev.status.as_str());
            } else {
                candidates_unknown.push(ev.event_id.as_str());
            }
        }
        let fresh = tx
            .query(
                &tx.prepare_cached("INSERT INTO webhook_events (event_id, idem_key, status, outcome)
                 SELECT e, k, s, 'pending' FROM unnest($1::text[], $2::text[], $3::text[]) AS t(e, k, s)
                 ON CONFLICT (event_id) DO NOTHING
                 RETURNING event_id").await?,
                &[&candidates_known, &c_keys, &c_status],
            )
            .await?;
        let fresh: std::collections::HashSet<String> =
            fresh.iter().map(|r| r.get::<_, String>(0)).collect();
        let seen_before: std::collections::HashSet<String> = if candidates_unknown.is_empty() {
            Default::default()
        } else {
            tx.query(
                &tx.prepare_cached(
                    "SELECT event_id FROM webhook_events WHERE event_id = ANY($1::text[])",
                )
                .await?,
                &[&candidates_unknown],
            )
            .await?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect()
        };

        let mut out: Vec<MergeOutcome> = Vec::with_capacity(events.len());
        let (mut e_kind, mut e_id, mut e_detail): (Vec<&str>, Vec<Option<i64>>, Vec<&str>) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut w_event, mut w_label) = (Vec::new(), Vec::new());
        for (i, ev) in events.iter().enumerate() {
            let first = first_at[ev.event_id.as_str()];
            if first != i {
                // A repeat within the batch: a duplicate if the first was
                // recorded (now or before), else the same answer as the first.
                let answer = match out[first] {
                    MergeOutcome::UnknownKey => MergeOutcome::UnknownKey,
                    _ => MergeOutcome::Duplicate,
                };
                if answer == MergeOutcome::Duplicate {
                    e_kind.push("duplicate_webhook");
                    e_id.push(None);
                    e_detail.push(ev.event_id.as_str());
                }
                out.push(answer);
                continue;
            }
            let Some(row) = known.get_mut(&ev.key) else {
                out.push(if seen_before.contains(&ev.event_id) {
                    e_kind.push("duplicate_webhook");
                    e_id.push(None);
                    e_detail.push(ev.event_id.as_str());
                    MergeOutcome::Duplicate
                } else {
                    MergeOutcome::UnknownKey
                });
                continue;
            };
            if !fresh.contains(&ev.event_id) {
                e_kind.push("duplicate_webhook");
                e_id.push(None);
                e_detail.push(ev.event_id.as_str());
                out.push(MergeOutcome::Duplicate);
                continue;
            }
            let (new, how) = fold_report(row.status, row.conflict, ev.status, false);
            if new.status != row.status || new.conflict != row.conflict {
                if !row.changed {
                    row.message_id = Some(ev.message_id.clone());
                }
                row.changed = true;
            }
            row.status = new.status;
            row.conflict = new.conflict;
            row.ever_done |= new.status.is_final() && !new.conflict;
            if let Some(kind) = merge_event_kind(how) {
                e_kind.push(kind);
                e_id.push(Some(row.action_id));
                e_detail.push("webhook");
            }
            w_event.push(ev.event_id.as_str());
            w_label.push(merge_label(how));
            out.push(MergeOutcome::Applied(how));
        }

        let (mut o_id, mut o_status, mut o_conflict, mut o_msg) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut done_ids = Vec::new();
        for row in known.values() {
            if row.changed {
                o_id.push(row.action_id);
                o_status.push(row.status.as_str());
                o_conflict.push(row.conflict);
                o_msg.push(row.message_id.as_deref());
            }
            if row.ever_done {
                done_ids.push(row.action_id);
            }
        }
        tx.execute(
            &tx.prepare_cached(
                "WITH o AS (
                 UPDATE outbox o SET status = u.status, conflict = u.conflict,
                        message_id = coalesce(o.message_id, u.message_id),
                        accepted_at = coalesce(o.accepted_at, now()),
                        final_at = CASE WHEN u.status IN ('delivered', 'failed')
                                        THEN coalesce(o.final_at, now()) END,
                        next_check_at = CASE WHEN u.conflict THEN now()
                                             WHEN u.status IN ('delivered', 'failed') THEN NULL
                                             ELSE o.next_check_at END
                 FROM unnest($1::bigint[], $2::text[], $3::bool[], $4::text[])
                     AS u(id, status, conflict, message_id)
                 WHERE o.action_id = u.id
             ), a AS (
                 UPDATE actions SET state = 'done', done_at = now()
                 WHERE id = ANY($5::bigint[]) AND state = 'dispatched'
             ), e AS (
                 INSERT INTO events (kind, action_id, detail)
                 SELECT * FROM unnest($6::text[], $7::bigint[], $8::text[])
             ), w AS (
                 UPDATE webhook_events w SET outcome = l.outcome
                 FROM unnest($9::text[], $10::text[]) AS l(event_id, outcome)
                 WHERE w.event_id = l.event_id
             )
             SELECT 1",
            )
            .await?,
            &[
                &o_id,
                &o_status,
                &o_conflict,
                &o_msg,
                &done_ids,
                &e_kind,
                &e_id,
                &e_detail,
                &w_event,
                &w_label,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(out)
    }
}

/// The event a merge leaves behind, if any.
pub(crate) fn merge_event_kind(how: Merge) -> Option<&'static str> {
    match how {
        Merge::Backward => Some("backward"),
        Merge::Conflict => Some("conflict"),
        Merge::Advance(_) | Merge::Same => None,
    }
}

/// The outcome recorded with a webhook event id.
pub(crate) fn merge_label(how: Merge) -> &'static str {
    match how {
        Merge::Advance(_) => "advanced",
        Merge::Same => "same",
        Merge::Backward => "backward",
        Merge::Conflict => "conflict",
    }
}
