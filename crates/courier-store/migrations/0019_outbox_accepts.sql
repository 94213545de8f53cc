-- courier schema, version 19: the recent acceptances in a small table of
-- their own, so that a settle is a HOT update of `outbox` (versions 13 and
-- 15 did the same for the claims and the merges).
--
-- Before: the dashboard's sampler walked the index `outbox_accepted`
-- (accepted_at, action_id), which names `accepted_at`, the column the
-- settle of an accepted intent writes. So every such settle wrote a new
-- entry into every index of `outbox`, `outbox_idem_key_key` and the
-- primary key among them, each as large as the history (1 GB and 240 MB
-- with 10,000,000 finished actions).
--
-- Now `outbox_accepts` holds one row per acceptance (an update that gives
-- an outbox row its accepted_at; nothing inserts an outbox row already
-- accepted but the history benchmark's seed), written by a statement
-- trigger in the settle's transaction. The sampler walks it after its
-- cursor. It keeps only the recent past: the pruner's fold trims what is
-- older than `ACCEPTS_KEEP_S` (src/views.rs), so its size follows the rate
-- of acceptances, not history.
--
-- The table is new, so its index needs no CONCURRENTLY. Creating the
-- trigger takes SHARE ROW EXCLUSIVE on outbox until commit, so the backfill
-- of the last ten minutes (through outbox_accepted, still there) misses
-- none. Version 20 drops outbox_accepted concurrently.

CREATE TABLE outbox_accepts (
    accepted_at timestamptz NOT NULL,
    action_id   bigint NOT NULL,
    PRIMARY KEY (accepted_at, action_id)
);

CREATE FUNCTION courier_accepts_update() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto
    AS $$
BEGIN
    INSERT INTO outbox_accepts (accepted_at, action_id)
    SELECT n.accepted_at, n.action_id
    FROM new_rows n JOIN old_rows o ON o.action_id = n.action_id
    WHERE o.accepted_at IS NULL AND n.accepted_at IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_accepts_update AFTER UPDATE ON outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_accepts_update();

INSERT INTO outbox_accepts (accepted_at, action_id)
SELECT accepted_at, action_id FROM outbox
WHERE accepted_at IS NOT NULL AND accepted_at > now() - interval '600 seconds';
