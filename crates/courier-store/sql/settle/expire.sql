-- Ends a claimed action 'expired' (its owner found the deadline passed and
-- the provider without its message: courier_core::step), fenced on (owner,
-- epoch), and releases its store's slot; no change when fenced (the caller
-- tells that from the row count). $1 id, $2 owner, $3 epoch, $4 the time
-- (NULL: the database's clock, see src/clock.rs).
WITH expired AS (
    UPDATE actions SET state = 'expired', lease_until = NULL,
           fail_reason = 'expired: not sent before expires_at',
           done_at = coalesce($4::timestamptz, now())
    WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
    RETURNING id, store
)
INSERT INTO store_releases (store, n) SELECT store, 1 FROM expired
