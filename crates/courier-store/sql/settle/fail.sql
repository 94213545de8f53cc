-- Marks a claimed action failed (the provider refused it), fenced on
-- (owner, epoch), and releases its store's slot; no change when fenced (the
-- caller tells that from the row count, and records the rejection or the
-- fence itself). $1 id, $2 owner, $3 epoch, $4 reason, $5 the time (NULL:
-- the database's clock, see src/clock.rs), $6 the provider's HTTP status
-- (what courier.redrive reads: only a 400 created nothing).
WITH failed AS (
    UPDATE actions SET state = 'failed', lease_until = NULL, fail_reason = $4,
           fail_status = $6::smallint, done_at = coalesce($5::timestamptz, now())
    WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
    RETURNING id, store
)
INSERT INTO store_releases (store, n) SELECT store, 1 FROM failed
