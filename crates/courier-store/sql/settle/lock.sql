-- The settles' fence: the action rows still held at the settle's lease
-- (owner, epoch, claimed), locked with their outbox rows, by action id.
-- $1 ids, $2 epochs, $3 owners.
SELECT a.id, a.store, o.status, o.conflict
FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS i(id, epoch, owner)
JOIN actions a ON a.id = i.id AND a.epoch = i.epoch AND a.owner = i.owner
JOIN outbox o ON o.action_id = a.id
WHERE a.state = 'claimed'
ORDER BY a.id
FOR UPDATE OF a, o
