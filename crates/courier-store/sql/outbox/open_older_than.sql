-- Open intents (no final status) older than $1 seconds.
SELECT count(*) FROM outbox
WHERE NOT courier_status_is_final(status)
  AND created_at < now() - $1 * interval '1 second'
