-- Removes at most $2 webhook event ids received more than $3 s (the event
-- id retention, above the provider's retry horizon) ago, oldest first;
-- never one inside that window. $1 now (NULL: the database's clock).
-- Answers how many it removed.
WITH gone AS (
    DELETE FROM webhook_events WHERE event_id IN (
        SELECT event_id FROM webhook_events
        WHERE received_at < coalesce($1::timestamptz, now()) - $3::float8 * interval '1 second'
        ORDER BY received_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) FROM gone
