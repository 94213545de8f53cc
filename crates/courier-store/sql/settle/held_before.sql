-- After a refused settle: the action as it is now, to tell our own earlier
-- settle (a retry after a lost commit answer) from a fence. $1 id.
SELECT a.owner, a.epoch, a.state, o.status
FROM actions a LEFT JOIN outbox o ON o.action_id = a.id WHERE a.id = $1
