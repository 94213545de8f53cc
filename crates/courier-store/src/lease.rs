//! Leases: claims (fair and FIFO, with or without the intent), reclaims of
//! expired leases, heartbeats, and the fence that every later write checks.
//! The lease statements read the time from the store's [`crate::Clock`].

use crate::error::StoreError;
use crate::pool::PgStore;
use serde::Serialize;
use std::str::FromStr;
use std::sync::Arc;

/// A claim's proof of ownership: every later write checks all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub action_id: i64,
    pub owner: Arc<str>,
    pub epoch: i64,
}

/// What a claim took, and the sweep of `store_work` it owes
/// ([`PgStore::action_claim_to_send_sweep_after`]).
#[derive(Debug)]
pub struct ClaimTaken {
    pub claimed: Vec<Claimed>,
    pub sweep: SweepOwed,
}

/// The stores a committed claim may have emptied, to remove from
/// `store_work` if they have no pending action, on the claim's own
/// connection. Run after the claim has committed: the sweep locks the store
/// rows the claim held, and must take its snapshot after that lock. Left
/// unrun (or failing), it costs no action anything: a row not swept is
/// swept by a later claim, each of which sweeps the first rows in line
/// that have no work.
#[must_use = "a claim's sweep runs only when asked"]
pub struct SweepOwed {
    store: PgStore,
    /// The claim's connection, held only when there is something to sweep.
    client: Option<deadpool_postgres::Object>,
    stores: Vec<String>,
}

impl std::fmt::Debug for SweepOwed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SweepOwed")
            .field("stores", &self.stores)
            .finish()
    }
}

impl SweepOwed {
    /// The stores to sweep.
    pub fn stores(&self) -> &[String] {
        &self.stores
    }

    /// Gives the claim's connection back to the pool: a sweep held back
    /// while further claims run must not hold one; it runs on a connection
    /// from the pool instead.
    pub fn release_connection(&mut self) {
        self.client = None;
    }

    /// Takes on another claim's sweep, to run as one statement: the stores
    /// of both (each once), on a connection from the pool.
    pub fn absorb(&mut self, other: SweepOwed) {
        self.client = None;
        for s in other.stores {
            if !self.stores.contains(&s) {
                self.stores.push(s);
            }
        }
    }

    /// Sweeps; an error is logged, never returned: the claim stands
    /// whatever becomes of its sweep (its actions are held, and an error
    /// here would leave them to wait out their lease).
    pub async fn run(self) {
        if self.stores.is_empty() {
            return;
        }
        let swept = match &self.client {
            Some(client) => self.store.store_work_sweep_on(client, &self.stores).await,
            None => self.store.store_work_sweep(&self.stores).await,
        };
        if let Err(e) = swept {
            tracing::warn!(error = %e, stores = self.stores.len(), "store_work sweep failed; the claim stands");
        }
    }
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

/// What a heartbeat found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heartbeat {
    /// Leases extended.
    pub held: Vec<i64>,
    /// Actions now held by another owner or at a newer epoch.
    pub fenced: Vec<i64>,
}

/// The fair claim: expired leases first, then the least recently served
/// stores with work and room under the cap, one action from each in turn.
const CLAIM_FAIR: &str = sql!("lease/claim_head", "lease/claim_fair", "lease/claim_tail");
/// The FIFO claim: expired leases first, then the oldest pending actions.
const CLAIM_FIFO: &str = sql!("lease/claim_head", "lease/claim_fifo", "lease/claim_tail");
/// The claims without the look for expired leases (see [`RECLAIM_EVERY_MS`]).
const CLAIM_FAIR_NO_RECLAIM: &str = sql!(
    "lease/claim_head_none",
    "lease/claim_fair",
    "lease/claim_tail"
);
const CLAIM_FIFO_NO_RECLAIM: &str = sql!(
    "lease/claim_head_none",
    "lease/claim_fifo",
    "lease/claim_tail"
);

/// How often an owner's claims look for expired leases while they come
/// back full. The look walks an index of leases from its oldest end, past
/// an entry left by every action that moved on since the last vacuum: in
/// the partial index `actions_lease` of `actions` before migration 13,
/// 17,877 buffers, 11.7 ms of a 33 ms claim after a round of `courier bench
/// history`; in `actions_held_lease` since, a small table that autovacuum
/// visits often, but still up to a minute of dead entries. Paid once a
/// second instead of by every claim.
/// A claim that comes back short (its worker has room and nothing pending
/// was found) makes the next one look at once, so an idle worker rescues
/// an expired lease as soon as it polls; a busy one within a second.
pub const RECLAIM_EVERY_MS: i64 = 1_000;
/// Owners whose pacing one store keeps.
const RECLAIM_OWNERS_MAX: usize = 1_024;

/// What a claim's pipeline opens with.
const CLAIM_BEGIN: &str = concat!("BEGIN;\n", sql!("plan/by_key"));

/// Every claim statement of a mode: with the look for expired leases, and
/// without it (what most claims run, see [`RECLAIM_EVERY_MS`]). For tests.
#[doc(hidden)]
pub fn claim_statements(mode: ClaimMode) -> [&'static str; 2] {
    match mode {
        ClaimMode::Fair => [CLAIM_FAIR, CLAIM_FAIR_NO_RECLAIM],
        ClaimMode::Fifo => [CLAIM_FIFO, CLAIM_FIFO_NO_RECLAIM],
    }
}

/// The text of a claim statement, so tests can check its plans (parameters:
/// $1 owner, $2 batch size, $3 lease ttl ms, $4 per-store cap, $5 write
/// intents, $6 the time or NULL). Not an API: run claims with
/// [`PgStore::action_claim`] and [`PgStore::action_claim_to_send`].
#[doc(hidden)]
pub fn claim_statement(mode: ClaimMode) -> &'static str {
    claim_statements(mode)[0]
}

impl PgStore {
    /// Claims up to `n` actions in one round trip: first actions whose lease
    /// ran out (at epoch + 1; looked for at most every [`RECLAIM_EVERY_MS`]
    /// while `owner`'s claims on this store come back full, and by the claim
    /// after one that came back short), then fresh ones in the chosen order. Safe under
    /// many concurrent claimers: action rows are locked with SKIP LOCKED, and
    /// a locked row is re-checked before it is taken (store rows: see the
    /// crate's invariants). Writes no intent: the owner calls
    /// [`PgStore::outbox_intent`] next.
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

    /// As [`PgStore::action_claim_to_send`], but returns before sweeping
    /// `store_work` of the stores the claim may have emptied: the caller
    /// starts its deliveries first, then runs the sweep it is handed
    /// ([`SweepOwed::run`]; a claim's actions need not wait a round trip for
    /// a sweep of rows that only the next claims read).
    pub async fn action_claim_to_send_sweep_after(
        &self,
        owner: &Arc<str>,
        n: u32,
        lease_ttl_ms: u64,
        store_in_flight_max: u32,
        mode: ClaimMode,
    ) -> Result<ClaimTaken, StoreError> {
        self.claim_owing(owner, n, lease_ttl_ms, store_in_flight_max, mode, true)
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
        let taken = self
            .claim_owing(
                owner,
                n,
                lease_ttl_ms,
                store_in_flight_max,
                mode,
                write_intents,
            )
            .await?;
        taken.sweep.run().await;
        Ok(taken.claimed)
    }

    async fn claim_owing(
        &self,
        owner: &Arc<str>,
        n: u32,
        lease_ttl_ms: u64,
        store_in_flight_max: u32,
        mode: ClaimMode,
        write_intents: bool,
    ) -> Result<ClaimTaken, StoreError> {
        let client = self.pool.get().await?;
        let n = i64::from(n);
        let ttl = lease_ttl_ms as f64;
        let cap = i32::try_from(store_in_flight_max).unwrap_or(i32::MAX);
        let now = self.clock.now();
        // Pacing only (the lease statements read their own time): the
        // manual clock's time in tests, else this machine's.
        let now_ms = now.map_or_else(
            || chrono::Utc::now().timestamp_millis(),
            |t| t.timestamp_millis(),
        );
        let reclaim = now_ms >= self.reclaim_next(owner);
        let sql = match (mode, reclaim) {
            (_, true) => claim_statement(mode),
            (ClaimMode::Fair, false) => CLAIM_FAIR_NO_RECLAIM,
            (ClaimMode::Fifo, false) => CLAIM_FIFO_NO_RECLAIM,
        };
        // Prepared once per connection and run with its generic plan, read
        // by key (crate::PLAN_BY_KEY; the plan is made again after an
        // ANALYZE of a table it reads). The settings are the transaction's
        // own (SET LOCAL), and the three requests leave together
        // (tokio-postgres pipelines requests polled at once), so they cost
        // no extra round trip; a claim that fails makes the COMMIT a
        // rollback.
        let statement = client.prepare_cached(sql).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&owner.as_ref(), &n, &ttl, &cap, &write_intents, &now];
        // `biased`: polled in this order, so sent in this order. `statement`
        // must be a prepared Statement: with SQL text, the prepare's round
        // trip would let the COMMIT leave before the claim.
        let (begun, rows, committed) = tokio::join!(
            biased;
            client.batch_execute(if self.switches().claim_custom_plans {
                "BEGIN"
            } else {
                CLAIM_BEGIN
            }),
            client.query(&statement, &params),
            client.batch_execute("COMMIT"),
        );
        begun?;
        let rows = rows?;
        committed?;
        let mut claimed = Vec::with_capacity(rows.len());
        let mut sweep: Vec<String> = Vec::new();
        for r in &rows {
            // A row with a store to sweep carries no action.
            if let Some(store) = r.get::<_, Option<String>>("sweep") {
                sweep.push(store);
                continue;
            }
            claimed.push(Claimed {
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
            });
        }
        if (claimed.len() as i64) < n {
            self.reclaim_set_next(owner, 0);
        } else if reclaim {
            self.reclaim_set_next(owner, now_ms + RECLAIM_EVERY_MS);
        }
        let sweep = SweepOwed {
            store: self.clone(),
            client: (!sweep.is_empty()).then_some(client),
            stores: sweep,
        };
        Ok(ClaimTaken { claimed, sweep })
    }

    /// When `owner`'s next claim looks for expired leases (0: now).
    fn reclaim_next(&self, owner: &Arc<str>) -> i64 {
        let next = self
            .reclaim_next_ms
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        next.get(owner).copied().unwrap_or(0)
    }

    fn reclaim_set_next(&self, owner: &Arc<str>, at_ms: i64) {
        let mut next = self
            .reclaim_next_ms
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Owners are a process's workers; a store that somehow sees many
        // more forgets them all, and each looks at its next claim.
        if next.len() >= RECLAIM_OWNERS_MAX && !next.contains_key(owner) {
            next.clear();
        }
        next.insert(owner.clone(), at_ms);
    }

    /// Removes from `store_work` those of `stores` that have no pending
    /// action, never waiting for a lock (a store whose row is locked, by a
    /// claim or by an enqueue still open, keeps its row). The claims call it
    /// with the stores they may have emptied; returns the stores removed.
    pub async fn store_work_sweep(&self, stores: &[String]) -> Result<Vec<String>, StoreError> {
        let client = self.pool.get().await?;
        self.store_work_sweep_on(&client, stores).await
    }

    async fn store_work_sweep_on(
        &self,
        client: &deadpool_postgres::Object,
        stores: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let row = client
            .query_one(
                &client.prepare_cached(self.sweep_statement()).await?,
                &[&stores],
            )
            .await?;
        Ok(row.get("removed"))
    }

    /// The sweep of `store_work` (broken in one negative control).
    fn sweep_statement(&self) -> &'static str {
        #[cfg(feature = "negative-controls")]
        if self.switches().store_work_sweep_unlocked {
            return sql!("lease/sweep_unlocked_broken");
        }
        sql!("lease/sweep")
    }

    /// Stores with a pending action and no row in `store_work`: always
    /// none (migration 0005). The checker of `tests/store_work.rs`, and of
    /// anyone who doubts it.
    pub async fn store_work_missing(&self) -> Result<Vec<String>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql!("lease/work_missing"), &[]).await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Actions whose `actions_ready` row disagrees with their state: always
    /// none (migration 12). The checker of `tests/actions_ready.rs`; it
    /// reads every action.
    pub async fn actions_ready_mismatch(&self) -> Result<Vec<i64>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql!("lease/ready_mismatch"), &[]).await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Actions whose `actions_held` or `actions_done` row disagrees with
    /// them, as (table, id): always none (migration 13). A checker for
    /// `tests/actions_ready.rs`; it reads every action.
    pub async fn actions_side_mismatch(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql!("lease/side_mismatch"), &[]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
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
        let now = self.clock.now();
        let rows = client
            .query(
                &client.prepare_cached(sql!("lease/heartbeat")).await?,
                &[&ids, &epochs, &owner, &ttl, &now],
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

    /// The current epoch of an action, after a refused fenced write.
    pub async fn fenced_now(&self, lease: &Lease) -> Result<Fenced, StoreError> {
        let client = self.pool.get().await?;
        let epoch: Option<i64> = client
            .query_opt(sql!("lease/epoch"), &[&lease.action_id])
            .await?
            .map(|r| r.get(0));
        Ok(Fenced {
            current_epoch: epoch,
        })
    }
}
