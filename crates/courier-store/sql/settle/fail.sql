-- Marks a claimed action failed (the provider refused it), fenced on
-- (owner, epoch), releases its store's slot and records the rejection; no
-- event and no change when fenced. $1 id, $2 owner, $3 epoch, $4 reason.
WITH failed AS (
    UPDATE actions SET state = 'failed', lease_until = NULL, fail_reason = $4, done_at = now()
    WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
    RETURNING id, store
), released AS (
    INSERT INTO store_releases (store, n) SELECT store, 1 FROM failed
), ev AS (
    SELECT 'rejected'::text AS kind, id AS action_id, $4::text AS detail FROM failed
),
