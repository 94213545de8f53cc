-- Removes, of the $2 oldest events (by id), the ones recorded more than $3 s
-- (the event retention) ago. Looking at the oldest $2 only keeps the scan
-- bounded when nothing is old enough. $1 now (NULL: the database's clock).
-- Answers how many it removed.
WITH gone AS (
    DELETE FROM events WHERE id IN (
        SELECT id FROM (SELECT id, at FROM events ORDER BY id LIMIT $2) oldest
        WHERE at < coalesce($1::timestamptz, now()) - $3::float8 * interval '1 second')
    RETURNING 1
)
SELECT count(*) FROM gone
