-- The actions held 'unknown', newest hold first: walked from the holds'
-- `events` rows (events_kind_id), never by a scan of `actions`, and kept
-- only while the action is still 'unknown' (a webhook or an operator moves
-- it on). $1 the most rows, $2 the stores the caller may see (NULL: all).
SELECT a.id, a.store, a.recipient,
       to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS held_at,
       e.detail AS reason, coalesce(o.attempts, 0) AS attempts, o.idem_key
FROM events e
JOIN actions a ON a.id = e.action_id
LEFT JOIN outbox o ON o.action_id = a.id
WHERE e.kind = 'held_unknown' AND a.state = 'unknown'
  AND ($2::text[] IS NULL OR a.store = ANY ($2::text[]))
ORDER BY e.id DESC
LIMIT $1
