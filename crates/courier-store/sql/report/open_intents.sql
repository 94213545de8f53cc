-- The oldest open intent's age (NULL when none is open; the first open row
-- of intents_watched, migration 15), and the open intents older than $1
-- seconds counted up to $2 (migrations 8 and 15), at the time $3 (NULL: the
-- database's clock, see src/clock.rs). How many intents are open comes from
-- the maintained counts. The function measures ages from now(), so it is
-- asked for the ages past $1 plus the clock's distance from now(): older
-- than $1 at $3.
SELECT (SELECT extract(epoch FROM coalesce($3::timestamptz, now()) - created_at)::float8
        FROM intents_watched
        WHERE open
        ORDER BY created_at LIMIT 1),
       courier_open_intents_past(
           $1 + extract(epoch FROM now() - coalesce($3::timestamptz, now()))::float8, $2)
