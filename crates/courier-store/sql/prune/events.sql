-- Removes, of the $2 oldest events (by id), the ones recorded more than $3 s
-- (the event retention) ago, except the hold of an action still held
-- `unknown`. Looking at the oldest $2 only keeps the scan
-- bounded when nothing is old enough. $1 now (NULL: the database's clock).
-- Answers how many it removed.
WITH gone AS (
    DELETE FROM events WHERE id IN (
        SELECT id FROM (
            SELECT id, at FROM events e
            -- The hold of an action still held is the operators' list
            -- (report/unknown.sql): kept, and passed over, until the
            -- action moves on.
            WHERE NOT (e.kind = 'held_unknown' AND EXISTS (
                SELECT 1 FROM actions a WHERE a.id = e.action_id AND a.state = 'unknown'))
            ORDER BY id LIMIT $2) oldest
        WHERE at < coalesce($1::timestamptz, now()) - $3::float8 * interval '1 second')
    RETURNING 1
)
SELECT count(*) FROM gone
