-- Ends a claimed action 'unknown' (its provider's tier offers no way to
-- learn whether an earlier attempt went out: courier_core::tier), fenced on
-- (owner, epoch), releases its store's slot, and records the hold as an
-- `events` row ('held_unknown', the reason as its detail) in the same
-- statement: the operators' list (report/unknown.sql) reads those rows. No
-- change when fenced (the caller tells that from the row count). $1 id,
-- $2 owner, $3 epoch, $4 reason, $5 the time (NULL: the database's clock,
-- see src/clock.rs).
WITH held AS (
    UPDATE actions SET state = 'unknown', lease_until = NULL, fail_reason = $4
    WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
    RETURNING id, store
), released AS (
    INSERT INTO store_releases (store, n) SELECT store, 1 FROM held
)
INSERT INTO events (at, kind, action_id, detail)
SELECT coalesce($5::timestamptz, now()), 'held_unknown', id, $4 FROM held
