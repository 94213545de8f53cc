//! Actions in the states tests start from, written through the store's own
//! API (never by hand-written SQL), so a fixture is only as right as the
//! store: enqueued, claimed (intent written), sent (an attempt counted),
//! settled (dispatched), and a lease that runs out when the test moves the
//! clock ([`expire_lease`]). The defaults fit the state: one action of store
//! `s1` to a valid number, claimed by [`OWNER`] under a lease that outlives
//! any test.

use courier_core::{action_key, Status};
use courier_store::{
    AttemptOutcome, ClaimMode, ClaimReq, Claimed, Clock, Lease, MergeOutcome, NewAction, PgStore,
    SettleOutcome, SettleReq, Settled, StoreError, WebhookIn,
};
use std::sync::Arc;
use std::time::Duration;

/// The owner the fixtures claim as.
pub const OWNER: &str = "fixture-worker";
/// A lease that outlives every test.
pub const LONG_LEASE_MS: u64 = 600_000;
/// The final-overdue time the fixtures settle with.
pub const FINAL_OVERDUE_MS: u64 = 60_000;
/// The message id the fixtures' settles and webhooks carry.
pub const MESSAGE_ID: &str = "msg_1";

/// The `n`th action of `store`, without a client key.
pub fn new_action(store: &str, n: usize) -> NewAction {
    NewAction {
        store: store.to_string(),
        to: "+15551234567".to_string(),
        body: format!("order {n} shipped"),
        key: None,
        ..Default::default()
    }
}

/// Enqueues `n` actions of `store`; returns their ids.
pub async fn enqueued(store: &PgStore, s: &str, n: usize) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        match store.action_enqueue(&new_action(s, i)).await.unwrap() {
            courier_store::Enqueued::Created(id) => ids.push(id),
            other => panic!("a fresh action was not created: {other:?}"),
        }
    }
    ids
}

/// Runs one claim ([`PgStore::action_claim`]) and at once the sweep it
/// names, as a claimer whose sweep is due does; a failed sweep is let go,
/// as the claimer lets it go (the claim stands). Returns what it took.
pub async fn claim_swept(store: &PgStore, req: &ClaimReq) -> Result<Vec<Claimed>, StoreError> {
    let taken = store.action_claim(req).await?;
    if !taken.sweep.is_empty() {
        if let Err(e) = store.store_work_sweep(&taken.sweep).await {
            eprintln!("fixtures: the claim's sweep failed ({e}); the claim stands");
        }
    }
    Ok(taken.claimed)
}

/// Claims up to `n` actions for `owner`, expired leases first, and writes
/// no intent (the owner writes it next, [`PgStore::outbox_intent`]); swept
/// at once ([`claim_swept`]).
pub async fn claim(
    store: &PgStore,
    owner: &Arc<str>,
    n: u32,
    lease_ttl_ms: u64,
    store_in_flight_max: u32,
    mode: ClaimMode,
) -> Result<Vec<Claimed>, StoreError> {
    let req = ClaimReq {
        provider: None,
        owner: owner.clone(),
        n,
        lease_ttl_ms,
        store_in_flight_max,
        mode,
        intents: false,
        reclaim: true,
    };
    claim_swept(store, &req).await
}

/// As [`claim`], and with the intents of fresh actions written and their
/// first attempts counted in the claim, as the worker claims.
pub async fn claim_to_send(
    store: &PgStore,
    owner: &Arc<str>,
    n: u32,
    lease_ttl_ms: u64,
    store_in_flight_max: u32,
    mode: ClaimMode,
) -> Result<Vec<Claimed>, StoreError> {
    let req = ClaimReq {
        provider: None,
        owner: owner.clone(),
        n,
        lease_ttl_ms,
        store_in_flight_max,
        mode,
        intents: true,
        reclaim: true,
    };
    claim_swept(store, &req).await
}

/// A claimed action: its lease, its idempotency key, and the message a
/// request for it carries.
#[derive(Debug, Clone)]
pub struct Held {
    pub lease: Lease,
    pub key: String,
    pub to: String,
    pub body: String,
}

/// Claims one pending action (fair, cap 1,000) for `owner` under a lease of
/// `lease_ttl_ms`, and writes its intent (no attempt counted).
pub async fn claimed_as(store: &PgStore, owner: &str, lease_ttl_ms: u64) -> Held {
    let who: Arc<str> = Arc::from(owner);
    let got = claim(store, &who, 1, lease_ttl_ms, 1_000, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "no pending action to claim: {got:?}");
    let c = &got[0];
    let key = action_key(&c.uid);
    let intent = store.outbox_intent(&c.lease, &key).await.unwrap().unwrap();
    assert!(intent.written_now || c.reclaimed, "{intent:?}");
    Held {
        lease: c.lease.clone(),
        key,
        to: c.to.clone(),
        body: c.body.clone(),
    }
}

/// Enqueues `n` actions of `s` and claims them all to send (intents
/// written, first attempts counted) as owner `w`, in one fair claim.
pub async fn claimed_to_send(store: &PgStore, s: &str, n: usize) -> Vec<Claimed> {
    enqueued(store, s, n).await;
    let owner: Arc<str> = Arc::from("w");
    let got = claim_to_send(
        store,
        &owner,
        n as u32,
        LONG_LEASE_MS,
        n as u32,
        ClaimMode::Fair,
    )
    .await
    .unwrap();
    assert_eq!(got.len(), n, "claimed {} of {n}", got.len());
    got
}

/// Claims one pending action for [`OWNER`] and writes its intent.
pub async fn claimed(store: &PgStore) -> Held {
    claimed_as(store, OWNER, LONG_LEASE_MS).await
}

/// A claimed action whose first attempt is counted: the state just before
/// the provider's answer is settled.
pub async fn sent(store: &PgStore) -> Held {
    let held = claimed(store).await;
    assert_eq!(
        store.outbox_count_attempt(&held.lease, 0).await.unwrap(),
        AttemptOutcome::Counted(1)
    );
    held
}

/// A sent action settled as accepted with [`MESSAGE_ID`]: dispatched, a key
/// webhooks can name.
pub async fn settled(store: &PgStore) -> Held {
    let held = sent(store).await;
    let s = settle(
        store,
        &held.lease,
        Status::Accepted,
        Some(MESSAGE_ID),
        false,
    )
    .await;
    assert!(matches!(s, SettleOutcome::Settled(_)), "{s:?}");
    held
}

/// One settle, as a batch of one (the store has no other form).
pub async fn settle(
    store: &PgStore,
    lease: &Lease,
    report: Status,
    message_id: Option<&str>,
    from_lookup: bool,
) -> SettleOutcome {
    let req = SettleReq {
        lease: lease.clone(),
        report,
        message_id: message_id.map(str::to_string),
        from_lookup,
    };
    let mut answers = store
        .actions_settle(&[req], FINAL_OVERDUE_MS)
        .await
        .unwrap();
    assert_eq!(answers.len(), 1);
    answers.remove(0).unwrap()
}

/// The [`Settled`] of a settle that must not be fenced.
pub fn settled_ok(outcome: SettleOutcome) -> Settled {
    match outcome {
        SettleOutcome::Settled(s) => s,
        SettleOutcome::Fenced(f) => panic!("the settle was fenced: {f:?}"),
    }
}

/// One webhook, as a batch of one, carrying [`MESSAGE_ID`].
pub async fn webhook(store: &PgStore, event_id: &str, key: &str, status: Status) -> MergeOutcome {
    let event = WebhookIn {
        event_id: event_id.to_string(),
        key: key.to_string(),
        status,
        message_id: MESSAGE_ID.to_string(),
    };
    let mut answers = store.webhooks_merge(&[event]).await.unwrap();
    assert_eq!(answers.len(), 1);
    answers.remove(0).unwrap()
}

/// Moves `clock` past the end of a lease of `lease_ttl_ms` taken (or last
/// extended) at the clock's present time: the lease has run out for every
/// lease statement of a store that reads `clock`.
pub fn expire_lease(clock: &Clock, lease_ttl_ms: u64) {
    clock.advance(Duration::from_millis(lease_ttl_ms + 1));
}

/// How long [`until_waiting_for_locks`] waits to see the transactions wait.
pub const LOCK_WAIT_SEEN_WITHIN: Duration = Duration::from_secs(20);

/// The first column of every row a read-only query returns (for tests that
/// check what a table holds after the store wrote it).
pub async fn column<T>(store: &PgStore, sql: &str) -> Vec<T>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    let c = store.client().await.unwrap();
    c.query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Waits until `n` backends of the store's database are waiting for a lock
/// (for tests that hold a transaction to force an interleaving); panics
/// after [`LOCK_WAIT_SEEN_WITHIN`].
pub async fn until_waiting_for_locks(store: &PgStore, n: i64) {
    let c = store.client().await.unwrap();
    let deadline = std::time::Instant::now() + LOCK_WAIT_SEEN_WITHIN;
    loop {
        let waiting: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{waiting} of {n} transactions seen waiting for a lock"
        );
        tokio::task::yield_now().await;
    }
}
