-- Extends the leases this owner still holds, never waiting for a row lock
-- (SKIP LOCKED): a row locked at this moment is simply not extended.
-- $1 ids, $2 their epochs, $3 owner, $4 lease ttl ms, $5 the time (NULL: the
-- database's clock).
WITH h AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS h(id, epoch)),
mine AS (
    SELECT a.id FROM actions a JOIN h ON a.id = h.id AND a.epoch = h.epoch
    WHERE a.owner = $3 AND a.state = 'claimed'
    ORDER BY a.id
    FOR UPDATE OF a SKIP LOCKED),
upd AS (
    UPDATE actions a
    SET lease_until = coalesce($5::timestamptz, now()) + $4 * interval '1 millisecond'
    FROM mine WHERE a.id = mine.id
    RETURNING a.id)
SELECT h.id,
       EXISTS (SELECT 1 FROM upd WHERE upd.id = h.id) AS extended,
       coalesce(a.epoch = h.epoch AND a.owner = $3, false) AS ours
FROM h LEFT JOIN actions a ON a.id = h.id
