-- Removes at most $2 finished actions, with their outbox rows, the ones that
-- finished longest ago first. It never takes:
-- - an action that is not final (state done or failed);
-- - one that finished less than $3 s (the action retention) ago;
-- - one whose key the provider may still replay: finished, or last heard of
--   (created, accepted, final), less than $4 s (the provider's key
--   retention) ago, whatever $3 says;
-- - one whose intent holds a conflict (a lookup is due);
-- - a row another transaction holds (SKIP LOCKED: it waits for nobody).
-- $1 now (NULL: the database's clock), $2 rows, $3 action retention s,
-- $4 key retention s. Answers the actions and outbox rows removed.
WITH doomed AS (
    SELECT a.id FROM actions a JOIN outbox o ON o.action_id = a.id
    WHERE a.state IN ('done', 'failed')
      AND a.done_at < coalesce($1::timestamptz, now()) - $3::float8 * interval '1 second'
      AND a.done_at < coalesce($1::timestamptz, now()) - $4::float8 * interval '1 second'
      AND greatest(o.created_at, o.accepted_at, o.final_at)
          < coalesce($1::timestamptz, now()) - $4::float8 * interval '1 second'
      AND NOT o.conflict
    ORDER BY a.done_at
    LIMIT $2
    FOR UPDATE OF a, o SKIP LOCKED
), outbox_gone AS (
    DELETE FROM outbox o USING doomed d WHERE o.action_id = d.id RETURNING 1
), actions_gone AS (
    DELETE FROM actions a USING doomed d WHERE a.id = d.id RETURNING 1
)
SELECT (SELECT count(*) FROM actions_gone), (SELECT count(*) FROM outbox_gone)
