//! Actions: enqueue (also inside the caller's own transaction), one or many,
//! and read.
//!
//! Every enqueue goes through the SQL functions of migration 21
//! (`courier.enqueue`, `courier.enqueue_many`): they hold the one
//! definition of a valid action and of the idempotency on `(store, key)`,
//! for this library, the HTTP API and callers in any language alike. This
//! module adds only what cannot reach SQL (a NUL) and maps the functions'
//! SQLSTATEs to [`EnqueueError`].

use crate::decode::{opt_status_col, state_col};
use crate::error::StoreError;
use crate::pool::PgStore;
use chrono::{DateTime, Utc};
use courier_core::{ActionState, Status};
use serde::Serialize;
use tokio_postgres::GenericClient;

/// A new action.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, Serialize)]
pub struct NewAction {
    pub store: String,
    pub to: String,
    pub body: String,
    pub key: Option<String>,
    /// Not claimed before this time (`scheduled` until then).
    #[serde(default)]
    pub not_before: Option<DateTime<Utc>>,
    /// Never sent after this time: it ends `expired` instead.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// An action as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionView {
    pub id: i64,
    pub store: String,
    pub key: Option<String>,
    pub to: String,
    pub state: ActionState,
    pub epoch: i64,
    pub status: Option<Status>,
    pub idempotency_key: Option<String>,
    pub attempts: i32,
    pub message_id: Option<String>,
    pub fail_reason: Option<String>,
    pub enqueued_at: String,
    pub not_before: Option<String>,
    pub expires_at: Option<String>,
    /// The action this one re-drives.
    pub redrive_of: Option<i64>,
    /// The action that re-drove this one.
    pub redriven_as: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Created(i64),
    /// The same `(store, key)` with the same content: the first action.
    Existing(i64),
}

impl Enqueued {
    pub fn id(self) -> i64 {
        match self {
            Enqueued::Created(id) | Enqueued::Existing(id) => id,
        }
    }
    pub fn created(self) -> bool {
        matches!(self, Enqueued::Created(_))
    }
}

/// A field out of its limits, as `courier.enqueue_problem` (migration 21)
/// or the NUL check below found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The item of a batch (0-based), `None` for a single enqueue or for
    /// the batch as a whole.
    pub index: Option<usize>,
    /// `store`, `to`, `body`, `key`, `not_before`, `expires_at`, or
    /// `items` (the batch as a whole).
    pub field: String,
    /// A stable code: `bad_store`, `bad_phone`, `empty_body`,
    /// `body_too_long`, `bad_body`, `bad_key`, `bad_items`, `too_many_items`,
    /// `time_too_old`, `time_too_far`, `already_expired`,
    /// `expires_before_not_before`.
    pub code: String,
    /// A sentence for people, naming the field (and the item).
    pub message: String,
}

/// Why an enqueue refused, by what the caller does next: fix the input
/// (`Invalid`, `KeyReused`), or retry with the same key (`Store`'s
/// `Unavailable`; the enqueue is idempotent on `(store, key)`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum EnqueueError {
    #[error("{}", .0.message)]
    Invalid(Invalid),
    /// The key names an action (or an earlier item of the same batch) with
    /// another recipient or body.
    #[error("{message}")]
    KeyReused {
        index: Option<usize>,
        existing_id: Option<i64>,
        message: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The single enqueue: `courier.enqueue`, one statement.
const ENQUEUE_SQL: &str = "SELECT id, created FROM courier.enqueue($1, $2, $3, $4, $5, $6)";
/// The set form: `courier.enqueue_many`, one statement.
const ENQUEUE_MANY_SQL: &str =
    "SELECT item, id, created FROM courier.enqueue_many($1, $2, $3, $4, $5, $6)";
const TEXT: tokio_postgres::types::Type = tokio_postgres::types::Type::TEXT;
const TEXT_ARRAY: tokio_postgres::types::Type = tokio_postgres::types::Type::TEXT_ARRAY;
const TIME: tokio_postgres::types::Type = tokio_postgres::types::Type::TIMESTAMPTZ;
const TIME_ARRAY: tokio_postgres::types::Type = tokio_postgres::types::Type::TIMESTAMPTZ_ARRAY;

/// Enqueues one action inside the caller's transaction (or on any client),
/// so an application can enqueue atomically with its own rows: the outbox
/// pattern. Validation is the SQL function's (`courier.enqueue`), the same
/// for every caller; one round trip.
pub async fn action_enqueue(
    client: &impl GenericClient,
    new: &NewAction,
) -> Result<Enqueued, EnqueueError> {
    no_nul(None, new)?;
    let row = client
        .query_typed_one(
            ENQUEUE_SQL,
            &[
                (&new.store, TEXT),
                (&new.to, TEXT),
                (&new.body, TEXT),
                (&new.key, TEXT),
                (&new.not_before, TIME),
                (&new.expires_at, TIME),
            ],
        )
        .await
        .map_err(enqueue_error)?;
    Ok(enqueued(row.get(0), row.get(1)))
}

/// Enqueues many actions in one statement (`courier.enqueue_many`), all or
/// nothing, inside the caller's transaction or on any client. The answer
/// has one entry per action, in order; a repeat of an earlier action of
/// the same call (same store, key and content) is `Existing` of its id.
/// At most [`courier_core::ENQUEUE_MANY_MAX`] actions.
pub async fn actions_enqueue_many(
    client: &impl GenericClient,
    news: &[NewAction],
) -> Result<Vec<Enqueued>, EnqueueError> {
    if news.is_empty() {
        return Ok(Vec::new());
    }
    for (i, new) in news.iter().enumerate() {
        no_nul(Some(i), new)?;
    }
    let cols = Columns::of(news);
    let rows = client
        .query_typed(
            ENQUEUE_MANY_SQL,
            &[
                (&cols.stores, TEXT_ARRAY),
                (&cols.tos, TEXT_ARRAY),
                (&cols.bodies, TEXT_ARRAY),
                (&cols.keys, TEXT_ARRAY),
                (&cols.not_befores, TIME_ARRAY),
                (&cols.expires_ats, TIME_ARRAY),
            ],
        )
        .await
        .map_err(enqueue_error)?;
    many_answer(news.len(), &rows)
}

/// The arrays of the set form's parameters.
struct Columns<'a> {
    stores: Vec<&'a str>,
    tos: Vec<&'a str>,
    bodies: Vec<&'a str>,
    keys: Option<Vec<Option<&'a str>>>,
    not_befores: Option<Vec<Option<DateTime<Utc>>>>,
    expires_ats: Option<Vec<Option<DateTime<Utc>>>>,
}

impl<'a> Columns<'a> {
    fn of(news: &'a [NewAction]) -> Self {
        let any_key = news.iter().any(|n| n.key.is_some());
        Columns {
            stores: news.iter().map(|n| n.store.as_str()).collect(),
            tos: news.iter().map(|n| n.to.as_str()).collect(),
            bodies: news.iter().map(|n| n.body.as_str()).collect(),
            keys: any_key.then(|| news.iter().map(|n| n.key.as_deref()).collect()),
            not_befores: news
                .iter()
                .any(|n| n.not_before.is_some())
                .then(|| news.iter().map(|n| n.not_before).collect()),
            expires_ats: news
                .iter()
                .any(|n| n.expires_at.is_some())
                .then(|| news.iter().map(|n| n.expires_at).collect()),
        }
    }
}

/// The set form's rows (1-based item, id, created), checked against the
/// request: one per action, in order.
fn many_answer(n: usize, rows: &[tokio_postgres::Row]) -> Result<Vec<Enqueued>, EnqueueError> {
    if rows.len() != n {
        return Err(StoreError::Query(format!(
            "courier.enqueue_many answered {} rows for {n} actions",
            rows.len()
        ))
        .into());
    }
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let item: i32 = r.get(0);
            debug_assert_eq!(item as usize, i + 1, "enqueue_many answers in item order");
            if item as usize != i + 1 {
                return Err(StoreError::Query(format!("item {item} answered at {i}")).into());
            }
            Ok(enqueued(r.get(1), r.get(2)))
        })
        .collect()
}

fn enqueued(id: i64, created: bool) -> Enqueued {
    if created {
        Enqueued::Created(id)
    } else {
        Enqueued::Existing(id)
    }
}

/// PostgreSQL's text cannot hold NUL (the server refuses the bytes before
/// any function sees them): refused here, with the field named.
fn no_nul(index: Option<usize>, new: &NewAction) -> Result<(), EnqueueError> {
    let fields = [
        ("store", new.store.as_str(), "bad_store"),
        ("to", new.to.as_str(), "bad_phone"),
        ("body", new.body.as_str(), "bad_body"),
        ("key", new.key.as_deref().unwrap_or(""), "bad_key"),
    ];
    match fields.iter().find(|(_, v, _)| v.contains('\0')) {
        None => Ok(()),
        Some((field, _, code)) => {
            let at = index.map_or(String::new(), |i| format!("item {}, ", i + 1));
            Err(EnqueueError::Invalid(Invalid {
                index,
                field: field.to_string(),
                code: code.to_string(),
                message: format!("{at}{field}: must not contain NUL"),
            }))
        }
    }
}

/// The SQL enqueue's errors (migration 21 lists them) as [`EnqueueError`].
fn enqueue_error(e: tokio_postgres::Error) -> EnqueueError {
    let Some(db) = e.as_db_error() else {
        return EnqueueError::Store(e.into());
    };
    let detail = db.detail().unwrap_or("");
    let detail_int = |name: &str| -> Option<i64> {
        detail
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
    };
    // The 1-based item of the set form, as a 0-based index.
    let index = detail_int("item").and_then(|i| usize::try_from(i - 1).ok());
    match db.code().code() {
        "22023" | "54000" if db.constraint().is_some() => EnqueueError::Invalid(Invalid {
            index,
            field: db.column().unwrap_or("items").to_string(),
            code: db.constraint().unwrap_or("bad_items").to_string(),
            message: db.message().to_string(),
        }),
        "QC001" => EnqueueError::KeyReused {
            index,
            existing_id: detail_int("existing"),
            message: db.message().to_string(),
        },
        _ => EnqueueError::Store(e.into()),
    }
}

impl PgStore {
    /// Enqueues on its own: `courier.enqueue` on a pooled connection,
    /// prepared once per connection, one round trip, its own transaction.
    pub async fn action_enqueue(&self, new: &NewAction) -> Result<Enqueued, EnqueueError> {
        no_nul(None, new)?;
        let client = self.pool.get().await.map_err(StoreError::from)?;
        let statement = client
            .prepare_typed_cached(ENQUEUE_SQL, &[TEXT, TEXT, TEXT, TEXT, TIME, TIME])
            .await
            .map_err(StoreError::from)?;
        let row = client
            .query_one(
                &statement,
                &[
                    &new.store,
                    &new.to,
                    &new.body,
                    &new.key,
                    &new.not_before,
                    &new.expires_at,
                ],
            )
            .await
            .map_err(enqueue_error)?;
        Ok(enqueued(row.get(0), row.get(1)))
    }

    /// Enqueues many on their own: [`actions_enqueue_many`] on a pooled
    /// connection (the statement is its own transaction: all or nothing).
    pub async fn actions_enqueue_many(
        &self,
        news: &[NewAction],
    ) -> Result<Vec<Enqueued>, EnqueueError> {
        let client = self.pool.get().await.map_err(StoreError::from)?;
        actions_enqueue_many(&**client, news).await
    }

    pub async fn action_get(&self, id: i64) -> Result<Option<ActionView>, StoreError> {
        let client = self.pool.get().await?;
        let row = client.query_opt(sql!("action/get"), &[&id]).await?;
        row.map(|r| {
            Ok(ActionView {
                id: r.get("id"),
                store: r.get("store"),
                key: r.get("client_key"),
                to: r.get("recipient"),
                state: state_col(&r, "state")?,
                epoch: r.get("epoch"),
                status: opt_status_col(&r, "status")?,
                idempotency_key: r.get("idem_key"),
                attempts: r.get("attempts"),
                message_id: r.get("message_id"),
                fail_reason: r.get("fail_reason"),
                enqueued_at: r.get("enqueued_at"),
                not_before: r.get("not_before"),
                expires_at: r.get("expires_at"),
                redrive_of: r.get("redrive_of"),
                redriven_as: r.get("redriven_as"),
            })
        })
        .transpose()
    }
}
