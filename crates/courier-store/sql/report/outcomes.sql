-- Every action with its final status (none while a conflict stands) and
-- its schedule, for the verifier.
SELECT a.id, a.uid, a.state,
       CASE WHEN courier_status_is_final(o.status) AND NOT o.conflict
            THEN o.status END AS final_status,
       a.not_before, a.expires_at
FROM actions a LEFT JOIN outbox o ON o.action_id = a.id ORDER BY a.id
