-- Open intents (no final status) older than $1 seconds at the time $3
-- (NULL: the database's clock, see src/clock.rs), counted up to $2: a walk
-- of the oldest open rows of intents_watched that stops at $2 (migration 8
-- says why it is a function, migration 15 what it walks). The function
-- measures ages from now(), so it is asked for the ages past $1 plus the
-- clock's distance from now().
SELECT courier_open_intents_past(
    $1 + extract(epoch FROM now() - coalesce($3::timestamptz, now()))::float8, $2)
