-- The head of both claims: actions whose lease ran out, re-taken at epoch + 1
-- (SKIP LOCKED: a claim never waits for an action row). $6 is the time
-- (NULL: the database's clock, see src/clock.rs).
WITH reclaimed AS (
    UPDATE actions a
    SET owner = $1, epoch = a.epoch + 1,
        lease_until = coalesce($6::timestamptz, now()) + $3 * interval '1 millisecond',
        claimed_at = coalesce($6::timestamptz, now())
    WHERE a.id IN (
        SELECT id FROM actions
        WHERE state = 'claimed' AND lease_until < coalesce($6::timestamptz, now())
        ORDER BY lease_until
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
    RETURNING a.id, a.uid, a.store, a.recipient, a.body, a.epoch, true AS reclaimed
),
