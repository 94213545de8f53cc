-- Counts an attempt before the request leaves: fenced on (owner, epoch), and
-- refused when the lease ends within the margin. The action row is locked
-- first, so a reclaim cannot slip in between the check and the increment.
-- $1 action id, $2 owner, $3 epoch, $4 margin ms, $5 the time (NULL: the
-- database's clock).
WITH fence AS (
    SELECT id,
           lease_until > coalesce($5::timestamptz, now()) + $4 * interval '1 millisecond'
               AS roomy
    FROM actions
    WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
    FOR UPDATE
), upd AS (
    UPDATE outbox SET attempts = attempts + 1
    FROM fence WHERE outbox.action_id = fence.id AND fence.roomy
    RETURNING outbox.attempts
)
SELECT (SELECT attempts FROM upd) AS attempts,
       EXISTS (SELECT 1 FROM fence) AS held,
       (SELECT epoch FROM actions WHERE id = $1) AS current_epoch
