-- Takes the actions due for a reconciling lookup (final status overdue, or a
-- conflict) and pushes their next check out, so concurrent reconcilers take
-- different ones (SKIP LOCKED). $1 how many, $2 recheck ms.
UPDATE outbox o SET next_check_at = now() + $2 * interval '1 millisecond',
       lookups = o.lookups + 1
WHERE o.action_id IN (
    SELECT o2.action_id FROM outbox o2 JOIN actions a ON a.id = o2.action_id
    WHERE o2.next_check_at <= now() AND (a.state = 'dispatched' OR o2.conflict)
    ORDER BY o2.next_check_at
    LIMIT $1
    FOR UPDATE OF o2 SKIP LOCKED)
RETURNING o.action_id, o.idem_key
