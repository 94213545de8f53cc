-- Intents whose intents_watched row disagrees with them (the invariant of
-- migration 15 says none), in id order: open or with a check due and no
-- row with the same created_at, openness and next check; or a row for an
-- intent that is neither (or no longer exists). Reads all of `outbox`: a
-- checker for tests, not for a running system.
SELECT o.action_id FROM outbox o
LEFT JOIN intents_watched w ON w.action_id = o.action_id
WHERE (NOT courier_status_is_final(o.status) OR o.next_check_at IS NOT NULL)
      <> (w.action_id IS NOT NULL)
   OR (w.action_id IS NOT NULL
       AND (w.created_at, w.open, w.next_check_at)
           IS DISTINCT FROM (o.created_at, NOT courier_status_is_final(o.status), o.next_check_at))
UNION
SELECT w.action_id FROM intents_watched w
WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.action_id = w.action_id)
ORDER BY 1
