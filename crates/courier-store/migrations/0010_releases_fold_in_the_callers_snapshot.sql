-- courier schema, version 10: the fold deletes exactly the releases its
-- caller's statement sees.
--
-- Migration 9's fold was one VOLATILE function that found and deleted a
-- store's releases, and a volatile function takes a snapshot of its own:
-- it also folded releases committed after the claim's statement began.
-- `courier bench history` then saw claims fail on `stores_in_flight_check`
-- (in_flight - released = -1, once -12; 7 claims in 4 rounds of 100,000,
-- each rolled back and retried, the counters right again at rest). Here the
-- releases are found by a STABLE function, which reads with the calling
-- statement's snapshot, as the join of migrations 2-8 did, and deleted by
-- id by a VOLATILE one; both keep the planner on the indexes whatever the
-- statistics say (migration 9, tests/plans.rs).
CREATE FUNCTION courier_releases_of(stores text[]) RETURNS bigint[]
    LANGUAGE sql STABLE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
AS $$
    SELECT coalesce(array_agg(r.id), ARRAY[]::bigint[])
    FROM store_releases r WHERE r.store = ANY (stores)
$$;

-- Deletes the given releases and returns them. The caller holds their
-- stores' rows locked, so no one else deletes them and this never waits.
CREATE FUNCTION courier_releases_delete(ids bigint[]) RETURNS TABLE (store text, n integer)
    LANGUAGE sql VOLATILE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
AS $$
    DELETE FROM store_releases r WHERE r.id = ANY (ids) RETURNING r.store, r.n
$$;

-- The sweep, as in migration 9 with the fold above (its second statement's
-- snapshot is taken after its lock, as before).
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

DROP FUNCTION courier_releases_fold(text[]);
