-- (fragment) The outbox status write, the one spelling of it: every outbox
-- row named in the CTE `u` (id, status, conflict, message_id, recheck_ms,
-- now: the statement's time, from the store's clock) takes the folded
-- status and conflict flag. The first message id sticks;
-- a conflict is due for a lookup at once; a final status needs no more
-- checks; otherwise the next check is recheck_ms away (a settle) or stays
-- where it was (recheck_ms NULL: a merge). The rows are reached by key:
-- the ids as an array as well as joined, so that a plan that walks
-- `outbox` first (made while the table was tiny) still walks only their
-- keys (tests/plans.rs).
report AS (
    UPDATE outbox o SET status = u.status, conflict = u.conflict,
           message_id = coalesce(o.message_id, u.message_id),
           accepted_at = coalesce(o.accepted_at, u.now),
           final_at = CASE WHEN courier_status_is_final(u.status)
                           THEN coalesce(o.final_at, u.now) END,
           next_check_at = CASE WHEN u.conflict THEN u.now
                                WHEN courier_status_is_final(u.status) THEN NULL
                                ELSE coalesce(u.now + u.recheck_ms * interval '1 millisecond',
                                              o.next_check_at) END
    FROM u WHERE o.action_id = u.id AND o.action_id = ANY (ARRAY(SELECT id FROM u))
),
