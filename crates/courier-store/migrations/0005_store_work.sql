-- courier schema, version 5: the stores with work, in the order the fair
-- claim serves them.
--
-- Before: the fair claim walked every row of `stores` in last_served_at
-- order and probed each for pending work. Idle stores were served long ago,
-- so they stood first in line and every claim walked past all of them:
-- 300 ms per claim with 100,000 stores registered (2.5 ms with 100). Now the
-- claim walks `store_work`, which holds a row for every store that has a
-- pending action (and, for a moment, some that no longer have one), through
-- its index in serving order: a claim costs in proportion to the stores it
-- walks past with work, not to the stores registered.
--
-- The invariant: every store with a committed pending action has a
-- committed row here, at every moment. It is kept by two writers:
-- - Adding: a trigger on every insert of actions (whatever the path: the
--   enqueue, a bulk load, a test's INSERT), in the inserting transaction,
--   after the action rows exist. It first takes FOR KEY SHARE on the store
--   rows, then inserts the missing rows (ON CONFLICT DO NOTHING: the
--   conflict check reads the latest committed rows, not the snapshot).
-- - Removing: only `courier_store_work_sweep` (below), which first takes
--   FOR UPDATE SKIP LOCKED on the store rows (it conflicts with FOR KEY
--   SHARE, so a store whose enqueue is still open is skipped), and only then,
--   in a new statement and so with a snapshot taken after the lock, deletes
--   the rows of the stores it holds that have no pending action.
-- The race this answers: a claim takes the last pending action of a store
-- while an enqueue for that store commits. Whichever way they interleave,
-- either the enqueue's transaction held its KEY SHARE lock before the sweep
-- locked the store (then the sweep cannot lock it until the enqueue has
-- committed, and its snapshot, taken after the lock, sees the new action),
-- or the sweep held the store first (then the enqueue's lock waits for the
-- sweep to commit, and its insert finds the row gone and adds it again).
-- A sweep that checks in the same statement as it locks would see neither
-- an enqueue still open nor one that committed between its snapshot and its
-- lock: tests/store_work.rs runs that broken sweep and catches it.
--
-- Nothing sets an action back to 'pending', so inserts are the only way a
-- store gains work. The claim keeps `last_served_at` here and on the store
-- row alike; new rows start from the store's.
--
-- The table is new, so its indexes need no CONCURRENTLY. Creating the
-- trigger takes SHARE ROW EXCLUSIVE on actions, so the backfill below sees
-- every committed action and no insert slips between it and the trigger;
-- writes to actions wait for the backfill (one pass over the pending index).

CREATE TABLE store_work (
    -- No foreign key: its check would take a share lock on the store row
    -- at every claim (stores are never deleted).
    store          text PRIMARY KEY,
    -- NULL sorts first: a store never served is next in line.
    last_served_at timestamptz
);
CREATE INDEX store_work_order ON store_work (last_served_at NULLS FIRST, store);

CREATE FUNCTION courier_store_work_add() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM stores s
    WHERE s.store IN (SELECT store FROM added WHERE state = 'pending')
    ORDER BY s.store
    FOR KEY SHARE;
    INSERT INTO store_work (store, last_served_at)
    SELECT s.store, s.last_served_at FROM stores s
    WHERE s.store IN (SELECT store FROM added WHERE state = 'pending')
    ORDER BY s.store
    ON CONFLICT (store) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER actions_store_work AFTER INSERT ON actions
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION courier_store_work_add();

INSERT INTO store_work (store, last_served_at)
SELECT s.store, s.last_served_at FROM stores s
WHERE s.store IN (SELECT DISTINCT store FROM actions WHERE state = 'pending');

-- Removes the rows of `candidates` whose stores have no pending action, and
-- folds those stores' releases into their in_flight (so store_releases does
-- not keep a row for every store that ever went idle). Never waits for a
-- lock. Each statement of a plpgsql function takes a new snapshot (read
-- committed), so the check below sees every enqueue that committed before
-- the lock was granted. Returns the stores removed.
CREATE FUNCTION courier_store_work_sweep(candidates text[]) RETURNS text[]
    LANGUAGE plpgsql AS $$
DECLARE
    held text[];
    removed text[];
BEGIN
    SELECT array_agg(x.store) INTO held FROM (
        SELECT st.store FROM stores st
        WHERE st.store = ANY (candidates)
        ORDER BY st.store
        FOR UPDATE SKIP LOCKED) x;
    IF held IS NULL THEN
        RETURN ARRAY[]::text[];
    END IF;
    WITH gone AS (
        DELETE FROM store_work w
        WHERE w.store = ANY (held)
          AND NOT EXISTS (SELECT 1 FROM actions a WHERE a.store = w.store AND a.state = 'pending')
        RETURNING w.store
    ), folded AS (
        DELETE FROM store_releases r USING gone g WHERE r.store = g.store
        RETURNING r.store, r.n
    ), counted AS (
        UPDATE stores st SET in_flight = st.in_flight - f.n
        FROM (SELECT store, sum(n)::int AS n FROM folded GROUP BY store) f
        WHERE st.store = f.store
    )
    SELECT coalesce(array_agg(store), ARRAY[]::text[]) INTO removed FROM gone;
    RETURN removed;
END $$;
