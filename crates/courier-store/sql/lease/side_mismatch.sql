-- Actions whose row in actions_held or actions_done disagrees with them (the
-- invariants of migration 13 say none), as (table, id) in that order:
-- claimed without an identical actions_held row (store, owner, epoch,
-- lease), or such a row for an action that is not claimed; final (done, failed, cancelled, expired) with a
-- done_at but no actions_done row with that done_at, or such a row for an
-- action that is not (or no longer exists). Reads all of `actions`: a
-- checker for tests, not for a running system.
SELECT 'actions_held' AS side, a.id FROM actions a
LEFT JOIN actions_held h ON h.id = a.id
WHERE (a.state = 'claimed') <> (h.id IS NOT NULL)
   OR (a.state = 'claimed' AND (a.store, a.owner, a.epoch, a.lease_until)
                               IS DISTINCT FROM (h.store, h.owner, h.epoch, h.lease_until))
UNION
SELECT 'actions_held', h.id FROM actions_held h
WHERE NOT EXISTS (SELECT 1 FROM actions a WHERE a.id = h.id)
UNION
SELECT 'actions_done', a.id FROM actions a
WHERE (a.state IN ('done', 'failed', 'cancelled', 'expired') AND a.done_at IS NOT NULL)
      <> EXISTS (SELECT 1 FROM actions_done d WHERE d.id = a.id AND d.done_at = a.done_at)
UNION
SELECT 'actions_done', d.id FROM actions_done d
WHERE NOT EXISTS (SELECT 1 FROM actions a
                  WHERE a.id = d.id AND a.done_at = d.done_at
                    AND a.state IN ('done', 'failed', 'cancelled', 'expired'))
ORDER BY 1, 2
