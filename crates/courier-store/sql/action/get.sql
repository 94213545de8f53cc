-- One action as the API shows it. $1 id.
SELECT a.id, a.store, a.client_key, a.recipient, a.state, a.epoch,
       o.status, o.idem_key, coalesce(o.attempts, 0) AS attempts,
       o.message_id, a.fail_reason,
       to_char(a.enqueued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS enqueued_at,
       to_char(a.not_before AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS not_before,
       to_char(a.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_at,
       a.redrive_of, a.redriven_as
FROM actions a LEFT JOIN outbox o ON o.action_id = a.id
WHERE a.id = $1
