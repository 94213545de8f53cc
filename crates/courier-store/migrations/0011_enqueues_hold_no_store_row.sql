-- courier schema, version 11: an enqueue holds no lock on its store's row.
--
-- Until now an enqueue took FOR KEY SHARE on the store row (the foreign key
-- of actions.store, and the store_work trigger of migration 5), and every
-- claim locks that row FOR NO KEY UPDATE SKIP LOCKED and updates it
-- (in_flight, last_served_at). A claim that commits while an enqueue still
-- holds its key-share lock leaves the old version's xmax a multixact of a
-- running locker and a committed updater. A claim whose snapshot is older
-- than that commit reaches the old version, passes SKIP LOCKED's
-- conditional wait (the running member does not conflict) and then follows
-- the update chain to the newest version, where PostgreSQL 15 waits for its
-- holder unconditionally (heap_lock_updated_tuple_rec), SKIP LOCKED or not.
-- Two claims doing this to each other is a deadlock; `courier bench
-- fairness --matrix` saw one a second (deadlock_timeout) in two 1,000-store
-- cells (docs/benchmarks.md). tests/claim_waits.rs runs the steps.
--
-- Now nothing but claims and sweeps locks a store row:
-- - The foreign key goes. Stores are never deleted and their key never
--   changes, so the trigger checks instead that every store an insert
--   names exists (without locking it) and refuses the insert otherwise,
--   with the same error code.
-- - The store_work handshake of migration 5 moves from row locks to
--   transaction-scoped advisory locks on (STORE_WORK_LOCK, hashtext(store)):
--   the trigger takes the shared lock, which waits only for a sweep; the
--   sweep tries the exclusive one and skips the stores it cannot have. The
--   argument of migration 5 is unchanged: either the enqueue held its lock
--   before the sweep tried (the sweep skips the store), or the sweep held it
--   first (the enqueue's lock waits for the sweep to commit, and its insert
--   finds the row gone and adds it again). A hash shared by two stores only
--   makes a sweep skip a store it could have swept.
-- - The sweep still locks the store rows FOR UPDATE SKIP LOCKED, which now
--   only excludes claims (a claim and a sweep both fold a store's releases).
--
-- Dropping the constraint takes ACCESS EXCLUSIVE on actions and stores for
-- a moment (no scan); the functions are replaced in place.

ALTER TABLE actions DROP CONSTRAINT IF EXISTS actions_store_fkey;

CREATE OR REPLACE FUNCTION courier_store_work_add() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    -- The foreign key's check: every store named exists.
    SELECT a.store INTO missing FROM added a
    WHERE NOT EXISTS (SELECT 1 FROM stores s WHERE s.store = a.store)
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'store % is not registered', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- 7 is STORE_WORK_LOCK: the advisory lock space of the store_work
    -- handshake (courier's other advisory locks take one bigint key, a
    -- space apart from two int keys). Store order: shared locks never wait
    -- for each other, only for a sweep, which never waits.
    PERFORM pg_advisory_xact_lock_shared(7, hashtext(x.store))
    FROM (SELECT DISTINCT store FROM added WHERE state = 'pending' ORDER BY store) x;
    INSERT INTO store_work (store, last_served_at)
    SELECT s.store, s.last_served_at FROM stores s
    WHERE s.store IN (SELECT store FROM added WHERE state = 'pending')
    ORDER BY s.store
    ON CONFLICT (store) DO NOTHING;
    RETURN NULL;
END $$;

-- The sweep of migration 10, with the enqueues' lock tried after the store
-- rows' (its check's snapshot is still taken after both).
CREATE OR REPLACE FUNCTION courier_store_work_sweep(candidates text[]) RETURNS text[]
    LANGUAGE plpgsql AS $$
DECLARE
    rows_held text[];
    held text[];
    removed text[];
BEGIN
    SELECT array_agg(x.store) INTO rows_held FROM (
        SELECT st.store FROM stores st
        WHERE st.store = ANY (candidates)
        ORDER BY st.store
        FOR UPDATE SKIP LOCKED) x;
    IF rows_held IS NULL THEN
        RETURN ARRAY[]::text[];
    END IF;
    SELECT array_agg(h.store ORDER BY h.store) INTO held
    FROM unnest(rows_held) AS h(store)
    WHERE pg_try_advisory_xact_lock(7, hashtext(h.store));
    IF held IS NULL THEN
        RETURN ARRAY[]::text[];
    END IF;
    WITH gone AS (
        DELETE FROM store_work w
        WHERE w.store = ANY (held)
          AND NOT EXISTS (SELECT 1 FROM actions a WHERE a.store = w.store AND a.state = 'pending')
        RETURNING w.store
    ), folded AS (
        SELECT f.store, f.n
        FROM courier_releases_delete(courier_releases_of(ARRAY(SELECT store FROM gone))) f
    ), counted AS (
        UPDATE stores st SET in_flight = st.in_flight - f.n
        FROM (SELECT store, sum(n)::int AS n FROM folded GROUP BY store) f
        WHERE st.store = f.store
    )
    SELECT coalesce(array_agg(store), ARRAY[]::text[]) INTO removed FROM gone;
    RETURN removed;
END $$;
