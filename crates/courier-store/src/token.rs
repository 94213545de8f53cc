//! API tokens (migration 22): who may send. The store keeps each token's
//! name, scope (an admin's, or a list of stores) and the SHA-256 of its
//! secret; the secret itself is drawn and shown by the caller
//! (`courier token create`) and never stored. Every change is an `events`
//! row (`token_created`, `token_revoked`), and bumps `api_tokens_version`,
//! which servers poll to reload the active tokens.

use crate::error::StoreError;
use crate::pool::PgStore;

/// A token as listed (no secret, no hash).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenInfo {
    pub id: i64,
    pub name: String,
    pub admin: bool,
    pub stores: Vec<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// An active token as a server checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveToken {
    pub id: i64,
    pub name: String,
    pub admin: bool,
    pub stores: Vec<String>,
    pub secret_sha256: Vec<u8>,
}

/// Why a token could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PgStore {
    /// Creates a token; its id. `stores` empty with `admin`, not empty
    /// without; each store name must be valid (`courier.store_problem`).
    pub async fn token_create(
        &self,
        name: &str,
        admin: bool,
        stores: &[String],
        secret_sha256: &[u8; 32],
    ) -> Result<i64, TokenError> {
        if !(1..=64).contains(&name.chars().count()) {
            return Err(TokenError::Invalid("name must be 1..64 characters".into()));
        }
        if admin != stores.is_empty() {
            return Err(TokenError::Invalid(
                "a token is an admin's (no stores) or names at least one store".into(),
            ));
        }
        let mut client = self.pool.get().await.map_err(StoreError::from)?;
        let tx = client.transaction().await.map_err(StoreError::from)?;
        let bad = tx
            .query_opt(
                "SELECT s, (courier.store_problem(s))[3] FROM unnest($1::text[]) AS s
                 WHERE courier.store_problem(s) IS NOT NULL LIMIT 1",
                &[&stores],
            )
            .await
            .map_err(StoreError::from)?;
        if let Some(row) = bad {
            let (s, why): (String, String) = (row.get(0), row.get(1));
            return Err(TokenError::Invalid(format!("store {s:?}: {why}")));
        }
        let id: i64 = tx
            .query_one(
                "INSERT INTO api_tokens (name, admin, stores, secret_sha256)
                 VALUES ($1, $2, $3, $4) RETURNING id",
                &[&name, &admin, &stores, &secret_sha256.as_slice()],
            )
            .await
            .map_err(StoreError::from)?
            .get(0);
        let detail = format!("token {id} ({name})");
        tx.execute(
            sql!("event/record", "event/record.part"),
            &[&"token_created", &None::<i64>, &detail],
        )
        .await
        .map_err(StoreError::from)?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(id)
    }

    /// Revokes a token; false when no active token has this id.
    pub async fn token_revoke(&self, id: i64) -> Result<bool, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let row = tx
            .query_opt(
                "UPDATE api_tokens SET revoked_at = now()
                 WHERE id = $1 AND revoked_at IS NULL RETURNING name",
                &[&id],
            )
            .await?;
        let Some(row) = row else {
            return Ok(false);
        };
        let name: String = row.get(0);
        let detail = format!("token {id} ({name})");
        tx.execute(
            sql!("event/record", "event/record.part"),
            &[&"token_revoked", &None::<i64>, &detail],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Every token, revoked ones included, oldest first.
    pub async fn token_list(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT id, name, admin, stores,
                        to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                        to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
                 FROM api_tokens ORDER BY id",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| TokenInfo {
                id: r.get(0),
                name: r.get(1),
                admin: r.get(2),
                stores: r.get(3),
                created_at: r.get(4),
                revoked_at: r.get(5),
            })
            .collect())
    }

    /// The version of the token table: it moves at every change.
    pub async fn tokens_version(&self) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one("SELECT version FROM api_tokens_version", &[])
            .await?;
        Ok(row.get(0))
    }

    /// The active tokens and the version they were read at, in one
    /// snapshot.
    pub async fn tokens_active(&self) -> Result<(i64, Vec<ActiveToken>), StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let version: i64 = tx
            .query_one("SELECT version FROM api_tokens_version", &[])
            .await?
            .get(0);
        let rows = tx
            .query(
                "SELECT id, name, admin, stores, secret_sha256 FROM api_tokens
                 WHERE revoked_at IS NULL",
                &[],
            )
            .await?;
        tx.commit().await?;
        let tokens = rows
            .iter()
            .map(|r| ActiveToken {
                id: r.get(0),
                name: r.get(1),
                admin: r.get(2),
                stores: r.get(3),
                secret_sha256: r.get(4),
            })
            .collect();
        Ok((version, tokens))
    }
}
