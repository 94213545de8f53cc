-- Stores with a pending action and no row in store_work (the invariant of
-- migration 0005 says none), in name order.
SELECT DISTINCT a.store FROM actions a
WHERE a.state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM store_work w WHERE w.store = a.store)
ORDER BY a.store
