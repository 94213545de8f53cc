-- The head of both claims: actions whose lease ran out, re-taken at epoch + 1
-- (SKIP LOCKED: a claim never waits for an action row). The expired leases
-- come from actions_held (migration 13), the lease that ran out longest ago
-- first; each action row is locked and its lease re-checked in a LATERAL
-- subquery, so only what this claim takes is locked. $6 is the time (NULL:
-- the database's clock, see src/clock.rs).
reclaimed AS (
    UPDATE actions a
    SET owner = $1, epoch = a.epoch + 1,
        lease_until = coalesce($6::timestamptz, now()) + $3 * interval '1 millisecond',
        claimed_at = coalesce($6::timestamptz, now())
    WHERE a.id IN (
        SELECT x.id
        FROM (SELECT h.id, h.lease_until FROM actions_held h
              WHERE h.lease_until < coalesce($6::timestamptz, now())
              ORDER BY h.lease_until
              LIMIT $2::bigint + 16) h
        CROSS JOIN LATERAL (
            SELECT a2.id FROM actions a2
            WHERE a2.id = h.id AND a2.state = 'claimed'
              AND a2.lease_until < coalesce($6::timestamptz, now())
            FOR UPDATE SKIP LOCKED) x
        LIMIT $2)
    RETURNING a.id, a.uid, a.store, a.recipient, a.body, a.epoch, true AS reclaimed,
              (extract(epoch FROM a.expires_at - coalesce($6::timestamptz, now())) * 1000)::bigint
                  AS expires_in_ms
),
