-- The merges of a batch, folded already: each changed outbox row takes its
-- status; an action finishes (dispatched -> done) on a final status without
-- conflict, and only a dispatched one or one held 'unknown' (which a report
-- of any status moves on: it is evidence of a send): a merge never writes a claimed
-- action row, so it never waits for a lease writer (src/lib.rs,
-- tests/locks.rs). Backward and conflicting reports and duplicates are
-- recorded (the event ids are recorded beside it: merge/event_ids_insert).
-- $1 ids, $2 statuses, $3 conflicts, $4 message ids, $5 ids now done,
-- $6-$8 events (kinds, action ids, details), $9 the time (NULL: the
-- database's clock, see src/clock.rs), carried in `u` for
-- outbox/report_write.part.sql.
WITH u AS (
    SELECT u.*, NULL::float8 AS recheck_ms, coalesce($9::timestamptz, now()) AS now
    FROM unnest($1::bigint[], $2::text[], $3::bool[], $4::text[])
        AS u(id, status, conflict, message_id)
), ev AS (
    SELECT * FROM unnest($6::text[], $7::bigint[], $8::text[]) AS ev(kind, action_id, detail)
), finished AS (
    UPDATE actions SET state = 'done', done_at = coalesce($9::timestamptz, now())
    WHERE id = ANY($5::bigint[]) AND state IN ('dispatched', 'unknown')
), evidenced AS (
    -- An action held 'unknown' whose key a report carries: the provider has
    -- the message (migration 25), so it is dispatched, or done just above.
    UPDATE actions SET state = 'dispatched'
    WHERE id = ANY($1::bigint[]) AND state = 'unknown' AND NOT id = ANY($5::bigint[])
),
