-- Ends a claimed action 'unknown' (its provider's tier offers no way to
-- learn whether an earlier attempt went out: courier_core::tier), fenced on
-- (owner, epoch), releases its store's slot, and records the hold as an
-- `events` row ('held_unknown', the reason as its detail) in the same
-- statement: the operators' list (report/unknown.sql) reads those rows.
-- Unless a webhook carrying its key has already merged a status into its
-- outbox row (a merge never writes a claimed action): that is evidence of
-- a send, and the action ends 'dispatched' (or 'done' on a final status)
-- instead. Locks as the other lease writers do, the action row (fenced:
-- a fenced hold locks nothing) before its outbox row; a merge locks the
-- outbox row first and writes the action row only once it is 'unknown', so
-- either the merge commits before this reads the status (FOR UPDATE reads
-- the newest) or it finds the action 'unknown' and moves it on. $1 id, $2
-- owner, $3 epoch, $4 reason, $5 the time (NULL: the database's clock, see
-- src/clock.rs). Answers the rows changed (0: fenced), the state and the
-- outbox status.
WITH mine AS (
    SELECT id FROM actions
    WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'claimed'
    FOR UPDATE
), o AS (
    SELECT o.status FROM outbox o JOIN mine ON o.action_id = mine.id
    FOR UPDATE OF o
), next AS (
    SELECT s.status,
           CASE WHEN s.status IS NULL OR s.status = 'sending' THEN 'unknown'
                WHEN courier_status_is_final(s.status) THEN 'done'
                ELSE 'dispatched' END AS state
    FROM (SELECT (SELECT status FROM o) AS status) s
), held AS (
    UPDATE actions a SET state = next.state, lease_until = NULL,
           fail_reason = CASE WHEN next.state = 'unknown' THEN $4::text END,
           done_at = CASE WHEN next.state = 'done'
                          THEN coalesce($5::timestamptz, now()) END
    FROM next, mine
    WHERE a.id = mine.id
    RETURNING a.id, a.store, a.state
), released AS (
    INSERT INTO store_releases (store, n) SELECT store, 1 FROM held
), recorded AS (
    INSERT INTO events (at, kind, action_id, detail)
    SELECT coalesce($5::timestamptz, now()), 'held_unknown', id, $4 FROM held
    WHERE state = 'unknown'
)
SELECT (SELECT count(*) FROM held) AS changed,
       (SELECT state FROM held) AS state,
       (SELECT status FROM next) AS status
