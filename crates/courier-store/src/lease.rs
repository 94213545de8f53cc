//! Leases: the claim (fair or FIFO, one entry point, [`PgStore::action_claim`]),
//! reclaims of expired leases, the sweep of `store_work`, heartbeats, and
//! the fence that every later write checks. The lease statements read the
//! time from the store's [`crate::Clock`].
//!
//! How often a claim looks for expired leases, and when a claim's sweep
//! runs, is the caller's to pace (the worker's claimer,
//! `courier_dispatch::worker::pacing`): the store keeps no state between
//! calls.

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

/// What a claim asks for ([`PgStore::action_claim`]).
#[derive(Debug, Clone)]
pub struct ClaimReq {
    /// The lease owner every claimed action is held by.
    pub owner: Arc<str>,
    /// At most this many actions.
    pub n: u32,
    pub lease_ttl_ms: u64,
    /// The fair claim takes nothing more of a store with this many actions
    /// in flight.
    pub store_in_flight_max: u32,
    pub mode: ClaimMode,
    /// Write, in the claim's statement (so under the same compare-and-set),
    /// the send intent of every fresh action with its first attempt counted
    /// ([`Claimed::attempt_counted`]): the owner may send it at once, if its
    /// own lease check passes; one round trip instead of three per action.
    /// The worker always asks for it. Without it the owner writes the
    /// intent next ([`PgStore::outbox_intent`]), as after any reclaim: the
    /// tests that take the steps one at a time.
    pub intents: bool,
    /// The provider the claimed actions will be sent to: its gate
    /// (`provider_gates`, migration 27) applies, a pause stopping fresh
    /// claims and a ceiling metering them. None: no gate.
    pub provider: Option<Arc<str>>,
    /// Look for expired leases first (taken at epoch + 1). The look walks
    /// the index of held leases from its oldest end, past the dead entries
    /// of every action that moved on since the last vacuum: the worker paces
    /// it (`courier_dispatch::worker::pacing::RECLAIM_EVERY_MS`).
    pub reclaim: bool,
}

/// What a claim took, and the stores it may have emptied.
#[derive(Debug)]
pub struct ClaimTaken {
    pub claimed: Vec<Claimed>,
    /// Stores whose last pending action the claim may have taken: to remove
    /// from `store_work` ([`PgStore::store_work_sweep`]) after the claim
    /// committed (the sweep locks the store rows the claim held, and must
    /// take its snapshot after that lock). Left unswept, they cost no action
    /// anything: a row not swept is swept after a later claim, each of
    /// which names the first rows in line that have no work.
    pub sweep: Vec<String>,
    /// The provider ([`ClaimReq::provider`]) is paused for this many more
    /// milliseconds (it answered "too many requests"): the claim took no
    /// fresh action, and no request should leave for it before then.
    pub provider_paused_ms: Option<u64>,
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
    /// Milliseconds from the claim's time (the database's, or the
    /// simulated one) to the action's `expires_at`, negative once past;
    /// `None` for an action without a deadline. The owner measures it from
    /// the moment it sent the claim, as it does the lease.
    pub expires_in_ms: Option<i64>,
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
const CLAIM_FAIR: &str = sql!(
    "lease/claim_gate",
    "lease/claim_head",
    "lease/claim_fair",
    "lease/claim_tail"
);
/// The FIFO claim: expired leases first, then the oldest pending actions.
const CLAIM_FIFO: &str = sql!(
    "lease/claim_gate",
    "lease/claim_head",
    "lease/claim_fifo",
    "lease/claim_tail"
);
/// The claims without the look for expired leases ([`ClaimReq::reclaim`] off).
const CLAIM_FAIR_NO_RECLAIM: &str = sql!(
    "lease/claim_gate",
    "lease/claim_head_none",
    "lease/claim_fair",
    "lease/claim_tail"
);
const CLAIM_FIFO_NO_RECLAIM: &str = sql!(
    "lease/claim_gate",
    "lease/claim_head_none",
    "lease/claim_fifo",
    "lease/claim_tail"
);

/// What a claim's pipeline opens with.
const CLAIM_BEGIN: &str = concat!("BEGIN;\n", sql!("plan/by_key"));

/// Every claim statement of a mode: with the look for expired leases, and
/// without it (what most of a busy worker's claims run, see
/// [`ClaimReq::reclaim`]). For tests.
#[doc(hidden)]
pub fn claim_statements(mode: ClaimMode) -> [&'static str; 2] {
    match mode {
        ClaimMode::Fair => [CLAIM_FAIR, CLAIM_FAIR_NO_RECLAIM],
        ClaimMode::Fifo => [CLAIM_FIFO, CLAIM_FIFO_NO_RECLAIM],
    }
}

/// The text of a claim statement, so tests can check its plans (parameters:
/// $1 owner, $2 batch size, $3 lease ttl ms, $4 per-store cap, $5 write
/// intents, $6 the time or NULL, $7 the provider or NULL). Not an API: run claims with
/// [`PgStore::action_claim`].
#[doc(hidden)]
pub fn claim_statement(mode: ClaimMode) -> &'static str {
    claim_statements(mode)[0]
}

impl PgStore {
    /// Claims up to `req.n` actions in one round trip: first actions whose
    /// lease ran out (at epoch + 1), when [`ClaimReq::reclaim`] asks, then
    /// fresh ones in the chosen order, with their intents when
    /// [`ClaimReq::intents`] asks. Safe under many concurrent claimers:
    /// action rows are locked with SKIP LOCKED, and a locked row is
    /// re-checked before it is taken (store rows: see the crate's
    /// invariants). The stores it may have emptied come back to be swept
    /// ([`ClaimTaken::sweep`]).
    ///
    /// The one claim: the worker's claimer, the benchmarks and the tests'
    /// fixtures all run it.
    pub async fn action_claim(&self, req: &ClaimReq) -> Result<ClaimTaken, StoreError> {
        let client = self.pool.get().await?;
        let n = i64::from(req.n);
        let ttl = req.lease_ttl_ms as f64;
        let cap = i32::try_from(req.store_in_flight_max).unwrap_or(i32::MAX);
        let now = self.clock.now();
        let sql = match (req.mode, req.reclaim) {
            (mode, true) => claim_statement(mode),
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
        let provider = req.provider.as_deref();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
            &req.owner.as_ref(),
            &n,
            &ttl,
            &cap,
            &req.intents,
            &now,
            &provider,
        ];
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
        let mut provider_paused_ms = None;
        for r in &rows {
            // A row with a pause carries nothing else.
            if let Some(ms) = r.get::<_, Option<i64>>("paused_ms") {
                provider_paused_ms = Some(u64::try_from(ms).unwrap_or(0));
                continue;
            }
            // A row with a store to sweep carries no action.
            if let Some(store) = r.get::<_, Option<String>>("sweep") {
                sweep.push(store);
                continue;
            }
            claimed.push(Claimed {
                lease: Lease {
                    action_id: r.get("id"),
                    owner: req.owner.clone(),
                    epoch: r.get("epoch"),
                },
                uid: r.get::<_, uuid::Uuid>("uid").simple().to_string(),
                store: r.get("store"),
                to: r.get("recipient"),
                body: r.get("body"),
                reclaimed: r.get("reclaimed"),
                attempt_counted: r.get("counted"),
                expires_in_ms: r.get("expires_in_ms"),
            });
        }
        // The worker's room and each store's cap rest on these: a claim
        // takes no more than asked, and every lease it grants is a fence
        // (epoch > 0, as the CHECK of migration 1 says too).
        assert!(
            claimed.len() <= req.n as usize,
            "a claim of {} took {}",
            req.n,
            claimed.len()
        );
        assert!(
            claimed.iter().all(|c| c.lease.epoch > 0),
            "a claim granted a lease at epoch 0"
        );
        Ok(ClaimTaken {
            claimed,
            sweep,
            provider_paused_ms,
        })
    }

    /// Removes from `store_work` those of `stores` that have no pending
    /// action, never waiting for a lock (a store whose row is locked, by a
    /// claim or by an enqueue still open, keeps its row). Claimers call it
    /// with the stores their claims may have emptied
    /// ([`ClaimTaken::sweep`]), after the claims committed; returns the
    /// stores removed.
    pub async fn store_work_sweep(&self, stores: &[String]) -> Result<Vec<String>, StoreError> {
        let client = self.pool.get().await?;
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
            debug_assert!(
                ids.contains(&id),
                "a heartbeat answered for {id}, not asked"
            );
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
