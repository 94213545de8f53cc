-- The middle of the fair claim: the least recently served stores with work
-- and room under the cap, one action from each in turn, oldest first within
-- a store. Store rows are locked FOR NO KEY UPDATE (enough to serialize
-- claims of one store, no obstacle to an enqueue's foreign-key check) and
-- SKIP LOCKED. Each store locks at most its share of the batch (the batch
-- over the number of stores, rounded up), so a claim locks about as many
-- action rows as it takes.
s AS (
    SELECT st.store, st.in_flight, st.last_served_at
    FROM stores st
    -- One probe of the per-store pending index per store (a LIMIT keeps
    -- the planner from scanning every action to find the stores with work).
    -- The FIFO index's predicate keeps it out of reach of these probes, so
    -- that no statistics can lead the planner to walk the whole pending
    -- queue once per store (migration 0003, tests/plans.rs).
    CROSS JOIN LATERAL (
        SELECT 1 FROM actions p WHERE p.store = st.store AND p.state = 'pending'
        ORDER BY p.id LIMIT 1) w
    LEFT JOIN (SELECT store, sum(n) AS n FROM store_releases GROUP BY store) r
        ON r.store = st.store
    WHERE st.in_flight - coalesce(r.n, 0) < $4::int
    ORDER BY st.last_served_at NULLS FIRST, st.store
    LIMIT $2
    FOR NO KEY UPDATE OF st SKIP LOCKED
),
released AS (
    DELETE FROM store_releases r USING s WHERE r.store = s.store
    RETURNING r.store, r.n
),
-- The store rows this claim holds: it counts only against them.
locked_stores AS (SELECT store FROM s),
ranked_stores AS (
    SELECT s.store,
           s.in_flight - coalesce((SELECT sum(x.n) FROM released x WHERE x.store = s.store), 0)
               AS in_flight,
           row_number() OVER (ORDER BY s.last_served_at NULLS FIRST, s.store) AS store_rank,
           count(*) OVER () AS k
    FROM s
),
locked AS (
    SELECT rs.store, rs.store_rank, p.id
    FROM ranked_stores rs
    CROSS JOIN LATERAL (
        SELECT a.id FROM actions a
        WHERE a.store = rs.store AND a.state = 'pending'
        ORDER BY a.id
        LIMIT GREATEST(LEAST($4 - rs.in_flight, ($2 + rs.k - 1) / rs.k), 0)
        FOR UPDATE SKIP LOCKED) p
),
chosen AS (
    SELECT id, store FROM (
        SELECT id, store, store_rank,
               row_number() OVER (PARTITION BY store ORDER BY id) AS turn
        FROM locked) t
    ORDER BY turn, store_rank
    LIMIT GREATEST($2 - (SELECT count(*) FROM reclaimed), 0)
),
