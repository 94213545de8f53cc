-- Removes at most $2 finished actions, with their outbox rows, the ones that
-- finished longest ago first. It never takes:
-- - an action that is not final (done, failed, cancelled or expired);
-- - one that finished less than $3 s (the action retention) ago;
-- - one whose key the provider may still replay: finished, or last heard of
--   (created, accepted, final), less than $4 s (the provider's key
--   retention) ago, whatever $3 says;
-- - one whose intent holds a conflict (a lookup is due);
-- - a row another transaction holds (SKIP LOCKED: it waits for nobody).
-- $1 now (NULL: the database's clock), $2 rows, $3 action retention s,
-- $4 key retention s. Answers the actions and outbox rows removed.
-- The finished actions are walked in actions_done (done_at, id), oldest
-- first (migration 13): a window of the oldest $2 + 10,000 keys under both
-- cutoffs (an ordered walk of its primary key, whatever the statistics say),
-- then each candidate's action and outbox rows locked and checked by key in
-- a LATERAL subquery, so nothing is joined or sorted in bulk. Joined
-- plainly, a planner that had never analysed the tables joined every
-- finished action by hash after a scan of `actions` (tests/side_table_plans.rs).
-- The window's 10,000 extra keys let a batch step over candidates it may
-- not take (a conflict, a key the provider may replay, a row locked);
-- should more than that ever stand first in line, batches come back empty
-- until they clear. Deleting an action deletes its row in actions_done
-- (trigger).
WITH doomed AS (
    SELECT x.id
    FROM (SELECT d.done_at, d.id FROM actions_done d
          WHERE d.done_at < coalesce($1::timestamptz, now()) - $3::float8 * interval '1 second'
            AND d.done_at < coalesce($1::timestamptz, now()) - $4::float8 * interval '1 second'
          ORDER BY d.done_at, d.id
          LIMIT $2::bigint + 10000) d
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT a.id FROM actions a JOIN outbox o ON o.action_id = a.id
            WHERE a.id = d.id
              AND a.state IN ('done', 'failed', 'cancelled', 'expired')
              AND a.done_at = d.done_at
              AND greatest(o.created_at, o.accepted_at, o.final_at)
                  < coalesce($1::timestamptz, now()) - $4::float8 * interval '1 second'
              AND NOT o.conflict
            FOR UPDATE OF a, o SKIP LOCKED) sent
        UNION ALL
        -- Cancelled or expired before any claim: no intent, no key ever
        -- used (an intent is never written for a final action).
        SELECT * FROM (
            SELECT a.id FROM actions a
            WHERE a.id = d.id
              AND a.state IN ('cancelled', 'expired')
              AND a.done_at = d.done_at
              AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.action_id = a.id)
            FOR UPDATE OF a SKIP LOCKED) unsent) x
    LIMIT $2
-- The deletes name their rows as an array, so each is a walk of the
-- primary key whatever the statistics (joined to `doomed`, a planner
-- estimating a small table hashed it after a scan).
), outbox_gone AS (
    DELETE FROM outbox o WHERE o.action_id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING 1
), actions_gone AS (
    DELETE FROM actions a WHERE a.id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING 1
)
SELECT (SELECT count(*) FROM actions_gone), (SELECT count(*) FROM outbox_gone)
