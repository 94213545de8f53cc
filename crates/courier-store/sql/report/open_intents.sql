-- The oldest open intent's age (NULL when none is open; the first open row
-- of intents_watched, migration 15), and the open intents older than $1
-- seconds counted up to $2 (migrations 8 and 15). How many intents are open
-- comes from the maintained counts.
SELECT (SELECT extract(epoch FROM now() - created_at)::float8 FROM intents_watched
        WHERE open
        ORDER BY created_at LIMIT 1),
       courier_open_intents_past($1, $2)
