-- Broken on purpose, for tests/locks.rs only (PgStore::with_merges_locking_claimed_actions):
-- locks the action rows of a merge's outbox rows whatever their state, as a
-- merge that broke the locking invariant would. Never run otherwise.
-- $1 action ids.
SELECT id FROM actions WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
