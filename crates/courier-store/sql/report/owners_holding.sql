-- Owners holding live leases, most first (from actions_held, migration 13:
-- its size follows the actions in flight).
SELECT owner, count(*) FROM actions_held WHERE lease_until > now()
GROUP BY owner ORDER BY count(*) DESC
