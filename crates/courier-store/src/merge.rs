//! Reports that carry no lease: the provider's webhooks and the
//! reconciler's lookups, merged forward-only into the outbox. One form, the
//! batch: the webhook API batches its merges (courier-dispatch's group
//! commit), and a lookup is a batch of one. Each webhook event id is
//! recorded in the transaction of its merge, so a repeat is a no-op.

use crate::decode::status_col;
use crate::error::StoreError;
use crate::pool::PgStore;
use courier_core::status::{fold_report, merge_event_kind, merge_label, Merge};
use courier_core::Status;
use deadpool_postgres::Transaction;
use std::collections::{HashMap, HashSet};

/// One webhook, already validated and its signature checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookIn {
    pub event_id: String,
    pub key: String,
    pub status: Status,
    pub message_id: String,
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

/// A report without a lease: a webhook (with its event id) or a lookup.
struct Report<'a> {
    event_id: Option<&'a str>,
    key: &'a str,
    status: Status,
    message_id: &'a str,
}

/// An outbox row named by the batch, as its reports fold into it.
struct OutboxRow {
    action_id: i64,
    status: Status,
    conflict: bool,
    changed: bool,
    /// Some report left it final without a conflict: finish a dispatched action.
    ever_done: bool,
    /// The message id of the first report that changed the row.
    message_id: Option<String>,
}

/// What the batch's webhook event ids are: the ids recorded before (read
/// after the batch's outbox rows were locked).
struct EventIds {
    seen_before: HashSet<String>,
}

/// The columns of a batch's write (`sql/merge/write.sql`).
#[derive(Default)]
struct MergeWrite<'a> {
    ids: Vec<i64>,
    statuses: Vec<&'static str>,
    conflicts: Vec<bool>,
    message_ids: Vec<Option<String>>,
    done_ids: Vec<i64>,
    event_kinds: Vec<&'static str>,
    event_ids: Vec<Option<i64>>,
    event_details: Vec<&'a str>,
    /// The event ids recorded with this batch, with their keys, statuses
    /// and outcomes (`sql/merge/event_ids_insert.sql`).
    recorded: Vec<&'a str>,
    recorded_keys: Vec<&'a str>,
    recorded_statuses: Vec<&'static str>,
    labels: Vec<&'static str>,
}

impl<'a> MergeWrite<'a> {
    fn event(&mut self, kind: &'static str, action_id: Option<i64>, detail: &'a str) {
        self.event_kinds.push(kind);
        self.event_ids.push(action_id);
        self.event_details.push(detail);
    }
}

impl PgStore {
    /// Merges webhooks in one transaction, each exactly as if they had come
    /// one after another in this order: its event id recorded with its
    /// merge, a repeated id a no-op (also within the batch), an unknown key
    /// recorded nowhere. If the batch fails for a reason other than the
    /// database being away, each webhook is merged as a batch of its own, so
    /// one bad event cannot hold back the others: hence an answer per event.
    /// A batch where one event id comes with two different keys (a provider
    /// bug) is merged one by one too, in order.
    pub async fn webhooks_merge(
        &self,
        events: &[WebhookIn],
    ) -> Result<Vec<Result<MergeOutcome, StoreError>>, StoreError> {
        let mut keys_of: HashMap<&str, &str> = HashMap::new();
        let same_key_per_id = events
            .iter()
            .all(|e| *keys_of.entry(e.event_id.as_str()).or_insert(e.key.as_str()) == e.key);
        let reports: Vec<Report> = events
            .iter()
            .map(|e| Report {
                event_id: Some(&e.event_id),
                key: &e.key,
                status: e.status,
                message_id: &e.message_id,
            })
            .collect();
        let together = if same_key_per_id {
            self.merge_together(&reports).await
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
                for r in &reports {
                    let one = self.merge_together(std::slice::from_ref(r));
                    out.push(one.await.map(|mut v| v.remove(0)));
                }
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    /// Merges what a reconciling lookup found (forward-only, and the
    /// lookup's final word settles a recorded conflict): a batch of one.
    pub async fn lookup_merge(
        &self,
        key: &str,
        status: Status,
        message_id: &str,
    ) -> Result<MergeOutcome, StoreError> {
        let report = Report {
            event_id: None,
            key,
            status,
            message_id,
        };
        Ok(self.merge_together(&[report]).await?.remove(0))
    }

    async fn merge_together(
        &self,
        reports: &[Report<'_>],
    ) -> Result<Vec<MergeOutcome>, StoreError> {
        if reports.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys: Vec<&str> = reports.iter().map(|r| r.key).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut event_ids: Vec<&str> = reports.iter().filter_map(|r| r.event_id).collect();
        event_ids.sort_unstable();
        event_ids.dedup();
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let lock = tx.prepare_cached(sql!("merge/lock")).await?;
        let seen = tx.prepare_cached(sql!("merge/event_ids_seen")).await?;
        // One round trip: the server runs the look-up after the lock, so a
        // merge of the same keys that held them has committed its ids.
        let (locked, seen) = tokio::join!(
            biased;
            async { tx.query(&lock, &[&keys]).await },
            async {
                if event_ids.is_empty() {
                    Ok(Vec::new())
                } else {
                    tx.query(&seen, &[&event_ids]).await
                }
            },
        );
        let mut rows = merges_locked(&locked?)?;
        let ids = EventIds {
            seen_before: seen?.iter().map(|r| r.get::<_, String>(0)).collect(),
        };
        // Broken on purpose (tests/locks.rs): the action rows, locked where
        // the write would wait if it wrote claimed rows.
        let broken_lock: Option<Vec<i64>> = self
            .switches()
            .merges_lock_claimed_actions
            .then(|| rows.values().map(|r| r.action_id).collect());
        let mut w = MergeWrite::default();
        let out = merges_fold(reports, &mut rows, &ids, &mut w);
        for row in rows.values() {
            if row.changed {
                w.ids.push(row.action_id);
                w.statuses.push(row.status.as_str());
                w.conflicts.push(row.conflict);
                w.message_ids.push(row.message_id.clone());
            }
            if row.ever_done {
                w.done_ids.push(row.action_id);
            }
        }
        let inserted = merges_write(&tx, &w, self.clock.now(), broken_lock.as_deref()).await?;
        // The insert names only the batch's ids: the count of those a
        // concurrent merge recorded first (below) cannot underflow.
        assert!(
            inserted <= w.recorded.len() as u64,
            "{inserted} event ids inserted of {} recorded",
            w.recorded.len()
        );
        if inserted != w.recorded.len() as u64
            && !self.switches().merges_ignore_ids_recorded_meanwhile
        {
            return Err(StoreError::Unavailable(format!(
                "{} of {} webhook event ids were recorded by a concurrent merge; retry",
                w.recorded.len() as u64 - inserted,
                w.recorded.len()
            )));
        }
        tx.commit().await?;
        Ok(out)
    }
}

/// The outbox rows the keys name (`merge/lock`, locked by action id), by key.
fn merges_locked(rows: &[tokio_postgres::Row]) -> Result<HashMap<String, OutboxRow>, StoreError> {
    let mut known = HashMap::with_capacity(rows.len());
    for r in rows {
        known.insert(
            r.get("idem_key"),
            OutboxRow {
                action_id: r.get("action_id"),
                status: status_col(r, "status")?,
                conflict: r.get("conflict"),
                changed: false,
                ever_done: false,
                message_id: None,
            },
        );
    }
    Ok(known)
}

/// Folds the reports, in order, into their rows; records the events and
/// labels in `w`; answers each report.
fn merges_fold<'a>(
    reports: &[Report<'a>],
    rows: &mut HashMap<String, OutboxRow>,
    ids: &EventIds,
    w: &mut MergeWrite<'a>,
) -> Vec<MergeOutcome> {
    let mut out: Vec<MergeOutcome> = Vec::with_capacity(reports.len());
    // The ids this batch records: a repeat of one is a duplicate, and a
    // repeat of an id whose earlier occurrences named unknown keys is merged
    // (the id is recorded at most once).
    let mut recorded_now: HashSet<&str> = HashSet::new();
    for r in reports {
        if let Some(id) = r.event_id {
            if ids.seen_before.contains(id) || recorded_now.contains(id) {
                w.event("duplicate_webhook", None, id);
                out.push(MergeOutcome::Duplicate);
                continue;
            }
        }
        let Some(row) = rows.get_mut(r.key) else {
            out.push(MergeOutcome::UnknownKey);
            continue;
        };
        let from_lookup = r.event_id.is_none();
        let (new, how) = fold_report(row.status, row.conflict, r.status, from_lookup);
        if new.status != row.status || new.conflict != row.conflict {
            if !row.changed {
                row.message_id = Some(r.message_id.to_string());
            }
            row.changed = true;
        }
        row.status = new.status;
        row.conflict = new.conflict;
        row.ever_done |= new.status.is_final() && !new.conflict;
        if let Some(kind) = merge_event_kind(how) {
            let source = if from_lookup { "lookup" } else { "webhook" };
            w.event(kind, Some(row.action_id), source);
        }
        if let Some(id) = r.event_id {
            recorded_now.insert(id);
            w.recorded.push(id);
            w.recorded_keys.push(r.key);
            w.recorded_statuses.push(r.status.as_str());
            w.labels.push(merge_label(how));
        }
        out.push(MergeOutcome::Applied(how));
    }
    out
}

/// The batch's event ids and writes, in one round trip; answers how many
/// event ids were inserted. Fewer than recorded means a concurrent merge
/// recorded one after this batch looked (a provider that sent one id with
/// two keys, so the two merges locked different rows): the caller rolls the
/// batch back as retryable, and retried, the id is a duplicate.
/// `now`: the store's clock. `broken_lock`: the action rows to lock between
/// the two, for the negative control of tests/locks.rs only.
async fn merges_write(
    tx: &Transaction<'_>,
    w: &MergeWrite<'_>,
    now: Option<chrono::DateTime<chrono::Utc>>,
    broken_lock: Option<&[i64]>,
) -> Result<u64, StoreError> {
    let insert = tx.prepare_cached(sql!("merge/event_ids_insert")).await?;
    let write = tx
        .prepare_cached(sql!(
            "merge/write",
            "outbox/report_write.part",
            "event/record.part"
        ))
        .await?;
    #[cfg(feature = "negative-controls")]
    let lock_actions = match broken_lock {
        Some(ids) => Some((tx.prepare(sql!("merge/lock_actions_broken")).await?, ids)),
        None => None,
    };
    // Without the feature no store asks for the broken lock.
    #[cfg(not(feature = "negative-controls"))]
    let lock_actions: Option<(tokio_postgres::Statement, &[i64])> = {
        debug_assert!(broken_lock.is_none());
        None
    };
    let (inserted, broken, written) = tokio::join!(
        biased;
        async {
            if w.recorded.is_empty() {
                Ok(0)
            } else {
                tx.execute(
                    &insert,
                    &[&w.recorded, &w.recorded_keys, &w.recorded_statuses, &w.labels],
                )
                .await
            }
        },
        async {
            match &lock_actions {
                Some((lock, ids)) => tx.execute(lock, &[ids]).await,
                None => Ok(0),
            }
        },
        async {
            tx.execute(
                &write,
                &[
                    &w.ids,
                    &w.statuses,
                    &w.conflicts,
                    &w.message_ids,
                    &w.done_ids,
                    &w.event_kinds,
                    &w.event_ids,
                    &w.event_details,
                    &now,
                ],
            )
            .await
        },
    );
    let inserted = inserted?;
    broken?;
    written?;
    Ok(inserted)
}
