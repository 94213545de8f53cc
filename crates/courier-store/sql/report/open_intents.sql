-- The oldest open intent's age (NULL when none is open; the first entry of
-- outbox_open), and the open intents older than $1 seconds counted up to $2
-- (migration 8). How many intents are open comes from the maintained counts.
SELECT (SELECT extract(epoch FROM now() - created_at)::float8 FROM outbox
        WHERE NOT courier_status_is_final(status)
        ORDER BY created_at LIMIT 1),
       courier_open_intents_past($1, $2)
