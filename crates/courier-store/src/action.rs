//! Actions: enqueue (also inside the caller's own transaction) and read.

use crate::decode::{opt_status_col, state_col};
use crate::error::StoreError;
use crate::pool::PgStore;
use courier_core::{ActionState, Status};
use serde::Serialize;
use tokio_postgres::GenericClient;

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
    pub state: ActionState,
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

/// Enqueues inside the caller's transaction (or on any client), so an
/// application can enqueue atomically with its own rows: the outbox pattern.
/// Validation of the content is the caller's (see `courier-dispatch`).
pub async fn action_enqueue(
    client: &impl GenericClient,
    new: &NewAction,
) -> Result<Enqueued, EnqueueError> {
    client
        .execute(sql!("action/store_insert"), &[&new.store])
        .await
        .map_err(StoreError::from)?;
    // Time-ordered (UUIDv7: 48 bits of milliseconds, then 74 random bits), so
    // a new action's uid, and the key derived from it, sort after every key
    // in history: its inserts into `actions.uid` and `outbox.idem_key` and the
    // new index entries of its non-HOT updates land on the indexes' rightmost
    // pages, which stay in cache, instead of a random leaf of indexes as large
    // as the history (docs/benchmarks.md, "History").
    let uid = uuid::Uuid::now_v7();
    let row = client
        .query_opt(
            sql!("action/enqueue"),
            &[&uid, &new.store, &new.key, &new.to, &new.body],
        )
        .await
        .map_err(StoreError::from)?;
    if let Some(row) = row {
        return Ok(Enqueued::Created(row.get(0)));
    }
    existing(client, new).await
}

/// The action a conflicting enqueue met (a conflict is only possible with a
/// client key): the same content is that action, other content an error.
async fn existing(client: &impl GenericClient, new: &NewAction) -> Result<Enqueued, EnqueueError> {
    let row = client
        .query_one(sql!("action/by_client_key"), &[&new.store, &new.key])
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
    /// Enqueues on its own: the store's registration and the action's insert
    /// are sent together (one round trip, statements prepared once per
    /// connection), each committing on its own. The registration is
    /// idempotent and stores are never deleted, so it may stand without the
    /// action (an insert refused); the insert runs after it has committed,
    /// so the `store_work` trigger's check that the store exists holds.
    pub async fn action_enqueue(&self, new: &NewAction) -> Result<Enqueued, EnqueueError> {
        let client = self.pool.get().await.map_err(StoreError::from)?;
        let (register, insert) = tokio::try_join!(
            client.prepare_cached(sql!("action/store_insert")),
            client.prepare_cached(sql!("action/enqueue")),
        )
        .map_err(StoreError::from)?;
        // Time-ordered, as in `action_enqueue` above.
        let uid = uuid::Uuid::now_v7();
        let register_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&new.store];
        let insert_params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&uid, &new.store, &new.key, &new.to, &new.body];
        let (_, row) = tokio::try_join!(
            client.execute(&register, &register_params),
            client.query_opt(&insert, &insert_params),
        )
        .map_err(StoreError::from)?;
        match row {
            Some(row) => Ok(Enqueued::Created(row.get(0))),
            None => existing(&**client, new).await,
        }
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
            })
        })
        .transpose()
    }
}
