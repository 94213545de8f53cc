-- The settles' fence: the action rows still held at the settle's lease
-- (owner, epoch, claimed), locked with their outbox rows, by action id.
-- $1 ids (ascending: the caller sorts them, and the rows are locked in
-- that order), $2 epochs, $3 owners.
-- Each action is looked up and locked in a LATERAL subquery, so both rows
-- are reached by the action's id whatever the statistics say: joined
-- plainly, a generic plan made while `outbox` held a row walked all of
-- its index for every settle (tests/plans.rs).
SELECT h.id, h.store, h.status, h.conflict
FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS i(id, epoch, owner)
CROSS JOIN LATERAL (
    SELECT a.id, a.store, o.status, o.conflict
    FROM actions a
    JOIN outbox o ON o.action_id = a.id
    WHERE a.id = i.id AND a.epoch = i.epoch AND a.owner = i.owner
      AND a.state = 'claimed'
    FOR UPDATE OF a, o) h
