-- Actions whose actions_ready or actions_scheduled row disagrees with them
-- (the invariants of migrations 12 and 23 say none): pending without a
-- ready row, or a ready row (or one naming another store or deadline) for
-- an action that is not pending; the same for scheduled actions and their
-- rows (store, not_before, expires_at); in id order. Reads all of
-- `actions`: a checker for tests, not for a running system.
SELECT a.id FROM actions a
LEFT JOIN actions_ready r ON r.id = a.id
WHERE (a.state = 'pending') <> (r.id IS NOT NULL)
   OR r.store <> a.store
   OR r.expires_at IS DISTINCT FROM (CASE WHEN r.id IS NOT NULL THEN a.expires_at END)
UNION
SELECT r.id FROM actions_ready r
WHERE NOT EXISTS (SELECT 1 FROM actions a WHERE a.id = r.id)
UNION
SELECT a.id FROM actions a
LEFT JOIN actions_scheduled s ON s.id = a.id
WHERE (a.state = 'scheduled') <> (s.id IS NOT NULL)
   OR (s.id IS NOT NULL AND (s.store, s.not_before, s.expires_at)
                            IS DISTINCT FROM (a.store, a.not_before, a.expires_at))
UNION
SELECT s.id FROM actions_scheduled s
WHERE NOT EXISTS (SELECT 1 FROM actions a WHERE a.id = s.id)
ORDER BY 1
