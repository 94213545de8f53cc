-- Actions whose actions_ready row disagrees with their state (the invariant
-- of migration 12 says none): pending without a row, or a row (or a row
-- naming another store) for an action that is not pending, in id order.
-- Reads all of `actions`: a checker for tests, not for a running system.
SELECT a.id FROM actions a
LEFT JOIN actions_ready r ON r.id = a.id
WHERE (a.state = 'pending') <> (r.id IS NOT NULL)
   OR r.store <> a.store
UNION
SELECT r.id FROM actions_ready r
WHERE NOT EXISTS (SELECT 1 FROM actions a WHERE a.id = r.id)
ORDER BY 1
