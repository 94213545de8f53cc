-- courier schema, version 9: a store's unfolded releases are read and
-- folded through store_releases_store, whatever the planner thinks of the
-- table.
--
-- Claims folded the releases of the stores they lock with a join of those
-- stores against all of store_releases, and probed a store's releases with
-- a sum over the table. The table churns (settles append, claims delete), so
-- its statistics are often wrong, and each way they were wrong cost a
-- sequential scan of a table that is mostly dead rows between autovacuum
-- passes:
-- - missing (a new database): the fold hash-joined a scan of the table,
--   10,295 rows and 393 buffers, 1.8 ms of a 3.4 ms claim with 10,000
--   stores with work in `courier bench scale`;
-- - taken when one store held every release: one scan per store;
-- - taken when the table was a page: a scan per store (171 pages each,
--   2,736 buffers, 2 ms of a 4.6 ms claim with 100 stores with work).
-- As in migration 8, these functions' own SET clauses leave the planner
-- nothing but the index (tests/plans.rs). The fold deletes every release of
-- the given stores, which the caller holds locked (so no one else deletes
-- them and the DELETE never waits), and returns them. It runs with a
-- snapshot of its own, so it also folds releases committed after the
-- caller's statement began; that could count a store below zero
-- (`courier bench history` caught it), and migration 10 replaces it with a
-- fold of what the caller's statement sees.
CREATE FUNCTION courier_releases_fold(stores text[]) RETURNS TABLE (store text, n integer)
    LANGUAGE sql VOLATILE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
AS $$
    DELETE FROM store_releases r WHERE r.store = ANY (stores) RETURNING r.store, r.n
$$;

-- The releases of one store not yet folded (the fair claim's probe of a
-- store whose counter alone is at the cap).
CREATE FUNCTION courier_releases_unfolded(one_store text) RETURNS bigint
    LANGUAGE sql STABLE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
AS $$
    SELECT coalesce(sum(r.n), 0) FROM store_releases r WHERE r.store = one_store
$$;

-- The sweep folds a removed store's releases the same way. Otherwise as in
-- migration 5.
CREATE OR REPLACE FUNCTION courier_store_work_sweep(candidates text[]) RETURNS text[]
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
        SELECT f.store, f.n FROM courier_releases_fold(ARRAY(SELECT store FROM gone)) f
    ), counted AS (
        UPDATE stores st SET in_flight = st.in_flight - f.n
        FROM (SELECT store, sum(n)::int AS n FROM folded GROUP BY store) f
        WHERE st.store = f.store
    )
    SELECT coalesce(array_agg(store), ARRAY[]::text[]) INTO removed FROM gone;
    RETURN removed;
END $$;
