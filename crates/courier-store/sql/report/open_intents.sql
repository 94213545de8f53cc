-- The oldest open intent's age, the open intents older than $1 seconds,
-- and their attempts and lookups.
SELECT extract(epoch FROM now() - min(created_at))::float8,
       count(*) FILTER (WHERE created_at < now() - $1 * interval '1 second'),
       coalesce(sum(attempts), 0)::bigint, coalesce(sum(lookups), 0)::bigint
FROM outbox WHERE NOT courier_status_is_final(status)
