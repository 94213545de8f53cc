-- Takes the actions due for a reconciling lookup (final status overdue, or a
-- conflict) and pushes their next check out, so concurrent reconcilers take
-- different ones (SKIP LOCKED). $1 how many, $2 recheck ms, $3 the time
-- (NULL: the database's clock, see src/clock.rs). The due checks
-- come from intents_watched (migration 15), the one due longest ago first;
-- each outbox row is locked and re-checked in a LATERAL subquery, so only
-- what this pick takes is locked.
UPDATE outbox o SET next_check_at = coalesce($3::timestamptz, now()) + $2 * interval '1 millisecond',
       lookups = o.lookups + 1
WHERE o.action_id IN (
    SELECT x.action_id
    FROM (SELECT w.action_id FROM intents_watched w
          WHERE w.next_check_at <= coalesce($3::timestamptz, now())
          ORDER BY w.next_check_at) w
    CROSS JOIN LATERAL (
        SELECT o2.action_id FROM outbox o2 JOIN actions a ON a.id = o2.action_id
        WHERE o2.action_id = w.action_id AND o2.next_check_at <= coalesce($3::timestamptz, now())
          AND (a.state = 'dispatched' OR o2.conflict)
        FOR UPDATE OF o2 SKIP LOCKED) x
    LIMIT $1)
RETURNING o.action_id, o.idem_key
