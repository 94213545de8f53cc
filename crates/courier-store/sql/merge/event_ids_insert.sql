-- Webhook event ids, recorded in the transaction of their merge; an id seen
-- before is not returned (a duplicate). $1 event ids, $2 keys, $3 statuses.
INSERT INTO webhook_events (event_id, idem_key, status, outcome)
SELECT e, k, s, 'pending' FROM unnest($1::text[], $2::text[], $3::text[]) AS t(e, k, s)
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id
