-- Owners holding live leases at the time $1 (NULL: the database's clock,
-- see src/clock.rs), most first (from actions_held, migration 13: its size
-- follows the actions in flight).
SELECT owner, count(*) FROM actions_held WHERE lease_until > coalesce($1::timestamptz, now())
GROUP BY owner ORDER BY count(*) DESC
