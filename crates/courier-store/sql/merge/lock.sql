-- The outbox rows that reports without a lease name, locked by action id
-- (merges take outbox rows first, then write dispatched action rows only).
-- $1 keys.
SELECT action_id, idem_key, status, conflict FROM outbox
WHERE idem_key = ANY($1::text[]) ORDER BY action_id FOR UPDATE
