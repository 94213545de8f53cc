-- Webhook event ids, recorded with their outcome in the transaction of
-- their merge, after the batch looked them up (merge/event_ids_seen) under
-- the lock of its outbox rows: inserted with their final outcome, so a
-- merge writes each row once and never updates it (an update of a row
-- inserted by the same transaction finds its page full, and is not HOT: a
-- new entry in each index, as large as the history). An id a concurrent
-- merge recorded meanwhile is not inserted; the caller counts the rows.
-- $1 event ids, $2 keys, $3 statuses, $4 outcomes.
INSERT INTO webhook_events (event_id, idem_key, status, outcome)
SELECT e, k, s, o FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(e, k, s, o)
ON CONFLICT (event_id) DO NOTHING
