-- The settles of a batch, fenced already (settle/lock.sql): each outbox row
-- takes its folded report, each action is dispatched (or done), its lease
-- released and its store's slot released (store_releases, never the store
-- row), and backward or conflicting reports are recorded. Rows are
-- reached by key whichever side a plan walks first (the ids also as an
-- array, as in outbox/report_write.part.sql).
-- $1 ids, $2 statuses, $3 message ids, $4 conflicts, $5 done, $6 stores,
-- $7 final-overdue ms, $8-$10 events (kinds, action ids, details), $11 the
-- time (NULL: the database's clock, see src/clock.rs), carried in `u` for
-- outbox/report_write.part.sql.
WITH u AS (
    SELECT u.*, $7::float8 AS recheck_ms, coalesce($11::timestamptz, now()) AS now
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bool[], $5::bool[], $6::text[])
        AS u(id, status, message_id, conflict, done, store)
), ev AS (
    SELECT * FROM unnest($8::text[], $9::bigint[], $10::text[]) AS ev(kind, action_id, detail)
), settled AS (
    UPDATE actions a
    SET state = CASE WHEN u.done THEN 'done' ELSE 'dispatched' END,
        lease_until = NULL, dispatched_at = u.now,
        done_at = CASE WHEN u.done THEN u.now END
    FROM u WHERE a.id = u.id AND a.id = ANY (ARRAY(SELECT id FROM u))
), released AS (
    INSERT INTO store_releases (store, n)
    SELECT store, count(*)::int FROM u GROUP BY store
),
