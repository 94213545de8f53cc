//! The long-life benchmarks' SQL (`courier bench history | soak |
//! live-migration`): seeding finished history without the API, the size of
//! the courier's tables, and the full-scan counts that the maintained counts
//! replaced (for comparison only).
//!
//! Nothing here is used by the courier at run time, so it lives with the
//! benchmarks (see [`crate::views`]).
//!
//! # Invariants
//! - Seeded history is what the protocol leaves behind for a delivered
//!   action: a `done` action, its outbox row (`delivered`, one attempt, the
//!   core's key `courier-<uid>`), one webhook event id; and one `backward`
//!   event per ten actions. It goes through the counts' triggers like any
//!   write, so the maintained counts stay exact.

use courier_store::{PgStore, StoreError};

/// The courier's tables, whose sizes the soak follows.
pub const COURIER_TABLES: &[&str] = &[
    "actions",
    "actions_ready",
    "actions_held",
    "actions_done",
    "outbox",
    "outbox_accepts",
    "intents_watched",
    "webhook_events",
    "events",
    "stores",
    "store_work",
    "store_releases",
    "counts",
    "count_deltas",
];

/// The largest chunk seeded in one statement.
pub const SEED_CHUNK_MAX: i64 = 1_000_000;

/// SQL for a UUIDv7 at the time `at` (an SQL expression), as
/// `action_enqueue` draws in Rust (`Uuid::now_v7`): the milliseconds since
/// the epoch in the first 48 bits, version 7, the rest from
/// `gen_random_uuid()` (whose variant bits are already right). Seeded rows
/// then sit in the uid and key indexes where the enqueue puts real ones.
pub(crate) fn uuid_v7_sql(at: &str) -> String {
    format!(
        "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) \
         placing substring(int8send((extract(epoch FROM {at}) * 1000)::bigint) FROM 3) \
         FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
    )
}

/// The long-life benchmarks' reads and writes of one database.
pub(crate) trait HistoryViews {
    /// Seeds finished actions `first..first + n` (numbers, not ids) over
    /// `stores` stores named `store-000`..., finished between `age_s` and
    /// `age_s + 3600` seconds ago, in one transaction. Returns the actions
    /// written.
    async fn history_seed(
        &self,
        first: i64,
        n: i64,
        stores: i64,
        age_s: f64,
    ) -> Result<u64, StoreError>;

    /// Keys of at most `limit` open intents (no final status), oldest first.
    ///
    /// Walks the open intents in order and reaches each outbox row by key,
    /// whatever the statistics: planned on `intents_watched` analysed while
    /// empty, the join hashed a scan of the whole outbox (243,240 blocks
    /// read in one round of `courier bench history` on 10,000,000 actions),
    /// which also emptied shared buffers of what the measured merges read.
    async fn intents_open_keys(&self, limit: u32) -> Result<Vec<String>, StoreError>;

    /// Table and index bytes of the courier's tables ([`COURIER_TABLES`]).
    async fn tables_bytes(&self) -> Result<i64, StoreError>;

    /// Actions by state counted the way `courier status` did before the
    /// maintained counts (a full scan), for comparison only.
    async fn actions_by_state_scanned(&self) -> Result<Vec<(String, i64)>, StoreError>;

    /// Vacuums and analyses the small tables of work in progress (the
    /// pending actions, the held leases, the intents still awaited, the
    /// stores with work, the store rows, releases, count deltas and recent
    /// acceptances), not the history: what autovacuum does on a server
    /// between two bursts, and what a benchmark's back-to-back rounds leave
    /// it no time to do.
    async fn work_tables_vacuum_analyze(&self) -> Result<(), StoreError>;

    /// `VACUUM ANALYZE` of the courier's tables (what autovacuum does after
    /// a bulk load, done at once so a run does not wait for it).
    async fn tables_vacuum_analyze(&self) -> Result<(), StoreError>;
}

impl HistoryViews for PgStore {
    async fn history_seed(
        &self,
        first: i64,
        n: i64,
        stores: i64,
        age_s: f64,
    ) -> Result<u64, StoreError> {
        if !(1..=SEED_CHUNK_MAX).contains(&n) || !(1..=100_000).contains(&stores) {
            return Err(StoreError::Query(format!(
                "seed chunk of {n} actions over {stores} stores is out of range"
            )));
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO stores (store)
             SELECT 'store-' || lpad(g::text, 3, '0') FROM generate_series(0, $1::bigint - 1) g
             ON CONFLICT (store) DO NOTHING",
            &[&stores],
        )
        .await?;
        let written: i64 = tx
            .query_one(
                &format!(
                "WITH a AS (
                     INSERT INTO actions (uid, store, recipient, body, state, epoch,
                                          enqueued_at, claimed_at, dispatched_at, done_at)
                     SELECT {uid}, 'store-' || lpad((g % $3::bigint)::text, 3, '0'),
                            '+1555' || lpad((g % 10000000)::text, 7, '0'), 'history ' || g,
                            'done', 1, t - interval '3 second', t - interval '2 second',
                            t - interval '1 second', t
                     FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) g,
                          LATERAL (SELECT now() - ($4::float8 + (g % 3600)) * interval '1 second' AS t) tt
                     RETURNING id, uid, done_at),
                 o AS (
                     INSERT INTO outbox (action_id, idem_key, epoch_written, status, attempts,
                                         message_id, created_at, accepted_at, final_at)
                     SELECT id, 'courier-' || replace(uid::text, '-', ''), 1, 'delivered', 1,
                            'msg_h' || id, done_at - interval '2 second',
                            done_at - interval '1 second', done_at
                     FROM a
                     RETURNING action_id, idem_key, final_at),
                 w AS (
                     INSERT INTO webhook_events (event_id, idem_key, status, outcome, received_at)
                     SELECT 'evt_h' || action_id, idem_key, 'delivered', 'advanced', final_at FROM o),
                 e AS (
                     INSERT INTO events (at, kind, action_id, detail)
                     SELECT final_at, 'backward', action_id, 'seeded' FROM o WHERE action_id % 10 = 0)
                 SELECT count(*) FROM o",
                    uid = uuid_v7_sql("t - interval '3 second'")
                ),
                &[&first, &n, &stores, &age_s],
            )
            .await?
            .get(0);
        tx.commit().await?;
        Ok(written as u64)
    }

    async fn intents_open_keys(&self, limit: u32) -> Result<Vec<String>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(
            "SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off;
             SET LOCAL enable_mergejoin = off",
        )
        .await?;
        let keys = tx
            .query(
                "SELECT o.idem_key FROM intents_watched w
                 JOIN outbox o ON o.action_id = w.action_id
                 WHERE w.open
                 ORDER BY w.created_at, w.action_id LIMIT $1",
                &[&i64::from(limit)],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        tx.commit().await?;
        Ok(keys)
    }

    async fn tables_bytes(&self) -> Result<i64, StoreError> {
        let names: Vec<String> = COURIER_TABLES.iter().map(|t| t.to_string()).collect();
        let client = self.client().await?;
        Ok(client
            .query_one(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind = 'r'
                   AND c.relname = ANY($1::text[])",
                &[&names],
            )
            .await?
            .get(0))
    }

    async fn actions_by_state_scanned(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.client().await?;
        Ok(client
            .query("SELECT state, count(*) FROM actions GROUP BY state", &[])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    async fn work_tables_vacuum_analyze(&self) -> Result<(), StoreError> {
        vacuum_analyze(
            self,
            &[
                "actions_ready",
                "actions_held",
                "intents_watched",
                "store_work",
                "stores",
                "store_releases",
                "count_deltas",
                "outbox_accepts",
            ],
        )
        .await
    }

    async fn tables_vacuum_analyze(&self) -> Result<(), StoreError> {
        vacuum_analyze(self, COURIER_TABLES).await
    }
}

/// `VACUUM ANALYZE` of `tables`.
async fn vacuum_analyze(store: &PgStore, tables: &[&str]) -> Result<(), StoreError> {
    let client = store.client().await?;
    client
        .batch_execute(&format!("VACUUM ANALYZE {}", tables.join(", ")))
        .await?;
    Ok(())
}
