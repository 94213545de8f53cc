-- Intents by status.
SELECT status, count(*) FROM outbox GROUP BY status ORDER BY status
