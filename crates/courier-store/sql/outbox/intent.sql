-- The send intent: in one statement (so one transaction), the
-- compare-and-set on (owner, epoch) and the insert of the outbox row with
-- the action's stable key; an existing intent (a reclaim) is returned as it
-- is, with its age (how long ago it was written, which is when the key's
-- first attempt was counted: the start of the key's window at a provider
-- of tier a-, courier_core::tier). $1 action id, $2 owner, $3 epoch, $4
-- key, $5 the time (NULL: the database's clock, see src/clock.rs).
WITH cas AS (
    SELECT id FROM actions
    WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
    FOR UPDATE
), ins AS (
    INSERT INTO outbox (action_id, idem_key, epoch_written)
    SELECT id, $4, $3 FROM cas
    ON CONFLICT (action_id) DO NOTHING
    RETURNING idem_key, attempts, status
)
SELECT EXISTS (SELECT 1 FROM cas) AS held,
       (SELECT count(*) FROM ins) AS written,
       coalesce((SELECT idem_key FROM ins), o.idem_key) AS idem_key,
       coalesce((SELECT attempts FROM ins), o.attempts) AS attempts,
       coalesce((SELECT status FROM ins), o.status) AS status,
       CASE WHEN o.created_at IS NULL THEN 0
            ELSE greatest(0, floor(extract(epoch FROM coalesce($5::timestamptz, now())
                                                     - o.created_at) * 1000))::bigint
       END AS age_ms,
       (SELECT epoch FROM actions WHERE id = $1) AS current_epoch
FROM (SELECT 1) one LEFT JOIN outbox o ON o.action_id = $1
