-- Open intents (no final status) older than $1 seconds, counted up to $2:
-- a walk of the oldest open rows of intents_watched that stops at $2
-- (migration 8 says why it is a function, migration 15 what it walks).
SELECT courier_open_intents_past($1, $2)
