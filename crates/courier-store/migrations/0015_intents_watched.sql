-- courier schema, version 15: the intents still awaited in a table of their
-- own, so that a webhook's merge is a HOT update of `outbox` (version 13 did
-- the same for `actions`).
--
-- Before: the partial indexes `outbox_open` (created_at of intents without
-- a final status) and `outbox_next_check` (next_check_at) name `status` and
-- `next_check_at`, which the merge of a final report changes, so every
-- merge wrote a new entry into every index of `outbox`, the primary key and
-- `outbox_idem_key_key` among them, each as large as the history.
--
-- Now `intents_watched` holds one row per intent that is open (no final
-- status) or has a check due (a lookup after a conflict, or after a final
-- status that is overdue): its created_at, whether it is open, and its
-- next check. What reads open intents oldest first (`courier status`, the
-- dashboard, `courier_open_intents_past`) and the reconciler's pick of due
-- checks read it. Its size follows the intents in flight, not history.
--
-- The invariant: a committed outbox row is open or has a next check if and
-- only if intents_watched holds a committed row for it with the same
-- created_at, openness and next check. Statement triggers on `outbox` keep
-- it in the transaction of each change; `PgStore::intents_watched_mismatch`
-- is the checker (tests/intents_watched.rs races it and catches a trigger
-- disabled on purpose).
--
-- The table is new, so its indexes need no CONCURRENTLY. Creating the first
-- trigger takes SHARE ROW EXCLUSIVE on outbox until commit, so the backfill
-- (the intents in flight, through the two partial indexes) misses none.
-- Version 16 drops those indexes concurrently.

CREATE TABLE intents_watched (
    action_id     bigint PRIMARY KEY,
    created_at    timestamptz NOT NULL,
    open          boolean NOT NULL,
    next_check_at timestamptz,
    CHECK (open OR next_check_at IS NOT NULL)
);
-- Open intents, oldest first: the reports and the age alert.
CREATE INDEX intents_watched_open ON intents_watched (created_at, action_id) WHERE open;
-- The reconciler's pick: the check due longest ago first.
CREATE INDEX intents_watched_next_check ON intents_watched (next_check_at)
    WHERE next_check_at IS NOT NULL;

CREATE FUNCTION courier_watched_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO intents_watched (action_id, created_at, open, next_check_at)
    SELECT action_id, created_at, NOT courier_status_is_final(status), next_check_at
    FROM added
    WHERE NOT courier_status_is_final(status) OR next_check_at IS NOT NULL;
    RETURN NULL;
END $$;

CREATE FUNCTION courier_watched_update() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    -- Gone once final with no check due.
    DELETE FROM intents_watched w
    USING old_rows o JOIN new_rows n ON n.action_id = o.action_id
    WHERE w.action_id = o.action_id
      AND (NOT courier_status_is_final(o.status) OR o.next_check_at IS NOT NULL)
      AND courier_status_is_final(n.status) AND n.next_check_at IS NULL;
    -- Written when it becomes watched or what is watched changes.
    INSERT INTO intents_watched AS w (action_id, created_at, open, next_check_at)
    SELECT n.action_id, n.created_at, NOT courier_status_is_final(n.status), n.next_check_at
    FROM new_rows n JOIN old_rows o ON o.action_id = n.action_id
    WHERE (NOT courier_status_is_final(n.status) OR n.next_check_at IS NOT NULL)
      AND (NOT (NOT courier_status_is_final(o.status) OR o.next_check_at IS NOT NULL)
           OR (o.created_at, courier_status_is_final(o.status), o.next_check_at)
              IS DISTINCT FROM (n.created_at, courier_status_is_final(n.status), n.next_check_at))
    ON CONFLICT (action_id) DO UPDATE
        SET created_at = excluded.created_at, open = excluded.open,
            next_check_at = excluded.next_check_at;
    RETURN NULL;
END $$;

CREATE FUNCTION courier_watched_delete() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM intents_watched w USING old_rows o WHERE w.action_id = o.action_id;
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_watched_insert AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION courier_watched_insert();
CREATE TRIGGER outbox_watched_update AFTER UPDATE ON outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_watched_update();
CREATE TRIGGER outbox_watched_delete AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_watched_delete();

INSERT INTO intents_watched (action_id, created_at, open, next_check_at)
SELECT action_id, created_at, NOT courier_status_is_final(status), next_check_at
FROM outbox WHERE NOT courier_status_is_final(status)
UNION
SELECT action_id, created_at, NOT courier_status_is_final(status), next_check_at
FROM outbox WHERE next_check_at IS NOT NULL;

-- Migration 8's walk of the oldest open intents, on intents_watched (same
-- settings, same answer).
CREATE OR REPLACE FUNCTION courier_open_intents_past(age_s float8, counted_max bigint) RETURNS bigint
    LANGUAGE sql STABLE
    SET enable_bitmapscan = off
    SET enable_seqscan = off
    SET jit = off
    AS $$
        SELECT count(*) FROM (
            SELECT 1 FROM intents_watched
            WHERE open AND created_at < now() - age_s * interval '1 second'
            ORDER BY created_at
            LIMIT counted_max) o
    $$;
