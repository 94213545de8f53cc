-- Which of these webhook event ids were recorded before: run right after
-- merge/lock, in its pipeline, so a merge of the same keys that held the
-- lock has committed its ids. $1 event ids.
SELECT event_id FROM webhook_events WHERE event_id = ANY($1::text[])
