//! Flow control's settings and gates (migration 27, `courier_core::rate`):
//! a store's rate, burst and in-flight cap; a provider's ceiling and its
//! pause after a "too many requests". The claim reads and debits them
//! (`sql/lease/claim_gate.sql`, `claim_fair.sql`); this module sets and
//! reports them.
//!
//! # Invariants
//! - Settings are validated here (`courier_core::rate`) before any write,
//!   and again by the tables' CHECKs: a refused change changes nothing.
//! - Every change writes its `events` row in the same transaction.
//! - A pause only lengthens: a shorter one never ends a longer one early.

use crate::error::StoreError;
use crate::pool::PgStore;
use chrono::{DateTime, Utc};
use courier_core::rate::{
    pause_ms as bounded_pause_ms, validate_name, ProviderSettings, SettingsError, StoreSettings,
};
use serde::Serialize;

/// A store's settings as they stand, with what its bucket and its slots
/// hold now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreFlow {
    pub store: String,
    /// What is in force (absent fields: the defaults; a rate's burst is
    /// the one set, or the rate's default as it was filled in then).
    pub settings: StoreSettings,
    /// Actions in flight, counted by the claims (releases not yet folded
    /// included).
    pub in_flight: i32,
    /// Whole sends its bucket allows now (None: no rate).
    pub tokens: Option<f64>,
    pub configured_at: Option<DateTime<Utc>>,
}

/// A provider's gate as it stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderFlow {
    pub provider: String,
    pub settings: ProviderSettings,
    pub tokens: Option<f64>,
    /// Milliseconds its pause still lasts (None: not paused).
    pub paused_ms: Option<u64>,
    /// Pauses begun or confirmed since the gate was made.
    pub pauses: i64,
    pub configured_at: Option<DateTime<Utc>>,
}

/// A settings change refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error(transparent)]
    Invalid(#[from] SettingsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PgStore {
    /// Sets a store's settings (replacing all three: a field left out goes
    /// back to its default), creating the store if it was never seen. Takes
    /// effect at the next claim of every worker. `by` names who asked (a
    /// token's name), for the `events` row.
    pub async fn store_configure(
        &self,
        store: &str,
        settings: &StoreSettings,
        by: &str,
    ) -> Result<StoreFlow, FlowError> {
        let (rate, cap) = settings.validate()?;
        validate_name("store", store)?;
        let client = self.pool.get().await.map_err(StoreError::from)?;
        let per_s = rate.map(|r| r.per_s);
        let burst = rate.map(|r| r.burst as i32);
        let cap = cap.map(|c| c as i32);
        client
            .execute(
                "SELECT courier.store_configure($1, $2, $3, $4, $5)",
                &[&store, &per_s, &burst, &cap, &by],
            )
            .await
            .map_err(StoreError::from)?;
        drop(client);
        self.store_flow(store).await?.ok_or_else(|| {
            FlowError::Store(StoreError::Query(format!(
                "store {store} configured, then not found"
            )))
        })
    }

    /// A store's settings and state; None for a store never seen.
    pub async fn store_flow(&self, store: &str) -> Result<Option<StoreFlow>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                "SELECT s.store, s.rate_per_s, s.burst, s.in_flight_max,
                        (s.in_flight - courier_releases_unfolded(s.store))::int AS in_flight,
                        courier_tokens(s.rate_per_s, s.burst, s.tokens, s.tokens_at, now()) AS tokens,
                        s.configured_at
                 FROM stores s WHERE s.store = $1",
                &[&store],
            )
            .await?;
        Ok(row.map(|r| store_flow_row(&r)))
    }

    /// The stores an operator has configured, by name, at most `limit`.
    pub async fn stores_configured(&self, limit: i64) -> Result<Vec<StoreFlow>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT s.store, s.rate_per_s, s.burst, s.in_flight_max,
                        (s.in_flight - courier_releases_unfolded(s.store))::int AS in_flight,
                        courier_tokens(s.rate_per_s, s.burst, s.tokens, s.tokens_at, now()) AS tokens,
                        s.configured_at
                 FROM stores s
                 WHERE s.rate_per_s IS NOT NULL OR s.in_flight_max IS NOT NULL
                 ORDER BY s.store LIMIT $1",
                &[&limit],
            )
            .await?;
        Ok(rows.iter().map(store_flow_row).collect())
    }

    /// Sets a provider's ceiling (replacing it), for every worker whose
    /// claims name this provider.
    pub async fn provider_configure(
        &self,
        provider: &str,
        settings: &ProviderSettings,
        by: &str,
    ) -> Result<ProviderFlow, FlowError> {
        let rate = settings.validate()?;
        validate_name("provider", provider)?;
        let client = self.pool.get().await.map_err(StoreError::from)?;
        let per_s = rate.map(|r| r.per_s);
        let burst = rate.map(|r| r.burst as i32);
        client
            .execute(
                "SELECT courier.provider_configure($1, $2, $3, $4)",
                &[&provider, &per_s, &burst, &by],
            )
            .await
            .map_err(StoreError::from)?;
        drop(client);
        self.provider_flow(provider).await?.ok_or_else(|| {
            FlowError::Store(StoreError::Query(format!(
                "provider {provider} configured, then not found"
            )))
        })
    }

    /// A provider's gate; None when it has neither a ceiling nor ever a pause.
    pub async fn provider_flow(&self, provider: &str) -> Result<Option<ProviderFlow>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                "SELECT g.provider, g.rate_per_s, g.burst,
                        courier_tokens(g.rate_per_s, g.burst, g.tokens, g.tokens_at, now()) AS tokens,
                        CASE WHEN g.paused_until > now()
                             THEN (extract(epoch FROM g.paused_until - now()) * 1000)::bigint END
                            AS paused_ms,
                        g.pauses, g.configured_at
                 FROM provider_gates g WHERE g.provider = $1",
                &[&provider],
            )
            .await?;
        Ok(row.map(|r| ProviderFlow {
            provider: r.get("provider"),
            settings: ProviderSettings {
                rate_per_s: r.get("rate_per_s"),
                burst: r.get::<_, Option<i32>>("burst").map(|b| b as u32),
            },
            tokens: r.get("tokens"),
            paused_ms: r
                .get::<_, Option<i64>>("paused_ms")
                .map(|ms| u64::try_from(ms).unwrap_or(0)),
            pauses: r.get("pauses"),
            configured_at: r.get("configured_at"),
        }))
    }

    /// Pauses `provider` for every worker for `pause_ms` (bounded by
    /// `courier_core::rate::PAUSE_MS_MAX`; a longer pause in force stays),
    /// on the store's clock. Answers how long the pause now lasts.
    pub async fn provider_pause(&self, provider: &str, pause_ms: u64) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        let ms = i64::try_from(bounded_pause_ms(Some(pause_ms), 1)).unwrap_or(i64::MAX);
        let at = self.clock.now();
        let row = client
            .query_one(
                &client
                    .prepare_cached("SELECT courier.provider_pause($1, $2, $3)")
                    .await?,
                &[&provider, &ms, &at],
            )
            .await?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }
}

fn store_flow_row(r: &tokio_postgres::Row) -> StoreFlow {
    let burst = r.get::<_, Option<i32>>("burst").map(|b| b as u32);
    StoreFlow {
        store: r.get("store"),
        settings: StoreSettings {
            rate_per_s: r.get("rate_per_s"),
            burst,
            in_flight_max: r.get::<_, Option<i32>>("in_flight_max").map(|c| c as u32),
        },
        in_flight: r.get("in_flight"),
        tokens: r.get("tokens"),
        configured_at: r.get("configured_at"),
    }
}
