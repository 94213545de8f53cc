-- Which of these webhook event ids were recorded before. $1 event ids.
SELECT event_id FROM webhook_events WHERE event_id = ANY($1::text[])
