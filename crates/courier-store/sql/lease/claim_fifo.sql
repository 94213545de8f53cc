-- The middle of the FIFO claim, for comparison: the oldest pending actions
-- of all stores, walked in the order of actions_ready's primary key
-- (migration 12), each action row locked as it is reached (SKIP LOCKED) and
-- re-checked as still pending. The lock is in a LATERAL subquery, which the
-- planner cannot merge into the walk: joined plainly, in a database never
-- analysed, it scanned all of `actions` and joined it to the walk
-- (tests/plans.rs). The walk passes at most 1,000 actions that other claims
-- hold. The per-store caps and rates do not apply ($4 is only referenced so
-- both claims take the same parameters; what it takes is still debited from
-- its stores' buckets); the provider's gate does. Unlike the fair claim, it waits: for the
-- store rows of what it took (to count them), which it locks in name order.
chosen AS (
    SELECT a.id, a.store
    FROM (SELECT r.id FROM actions_ready r
          ORDER BY r.id
          LIMIT GREATEST($2 - (SELECT count(*) FROM reclaimed), 0) + 1000) r
    CROSS JOIN LATERAL (
        SELECT a.id, a.store FROM actions a
        WHERE a.id = r.id AND a.state = 'pending' AND $4 >= 0
        FOR UPDATE SKIP LOCKED) a
    LIMIT LEAST(GREATEST($2 - (SELECT count(*) FROM reclaimed), 0), (SELECT n FROM budget))
),
-- The chosen actions' store rows, locked in name order (so two FIFO claims
-- cannot wait on each other in a cycle) before their releases are folded.
fifo_stores AS (
    SELECT st.store FROM stores st WHERE st.store IN (SELECT store FROM chosen)
    ORDER BY st.store
    FOR NO KEY UPDATE
),
-- Found in this statement's snapshot and deleted by id, as in claim_fair.sql.
released AS (
    SELECT f.store, f.n
    FROM courier_releases_delete(courier_releases_of(ARRAY(SELECT store FROM fifo_stores))) f
),
locked_stores AS (SELECT store FROM fifo_stores),
-- The FIFO claim sweeps nothing from store_work; fair claims clean up
-- after it (see claim_fair.sql).
sweep AS (SELECT NULL::text AS store WHERE false),
