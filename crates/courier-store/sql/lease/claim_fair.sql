-- The middle of the fair claim: the least recently served stores with work
-- and room under the cap, one action from each in turn, oldest first within
-- a store. The stores come from `store_work` (migration 0005), walked
-- through its index in serving order, so idle stores are never visited.
-- Store rows are locked FOR NO KEY UPDATE (enough to serialize claims of one
-- store) and SKIP LOCKED; enqueues lock no store row (migration 11).
-- Each store locks at most its share of the batch (the batch over the
-- number of stores, rounded up), so a claim locks about as many action rows
-- as it takes.
s AS (
    SELECT st.store, st.in_flight, w.last_served_at
    FROM store_work w
    JOIN stores st ON st.store = w.store
    -- One probe of the per-store pending index per store (a LIMIT keeps
    -- the planner from scanning every action to find the stores with work).
    -- The FIFO index's predicate keeps it out of reach of these probes, so
    -- that no statistics can lead the planner to walk the whole pending
    -- queue once per store (migration 0003, tests/plans.rs).
    CROSS JOIN LATERAL (
        SELECT 1 FROM actions p WHERE p.store = w.store AND p.state = 'pending'
        ORDER BY p.id LIMIT 1) p
    -- The store's releases not yet folded, probed per store (store_releases
    -- holds a row for each release of any store; summing all of it per
    -- claim would cost in proportion to the stores that ever sent), and
    -- only when the counter alone is at the cap: releases only lower it, so
    -- a counter under the cap already leaves room (OR stops at its first
    -- true argument). Between two autovacuum passes store_releases is
    -- mostly dead rows, 58-64 pages per store probed in `courier bench
    -- scale` (docs/benchmarks.md); the probe goes through the table's index
    -- whatever its statistics say (migration 9).
    WHERE (st.in_flight < $4::int
           OR st.in_flight - courier_releases_unfolded(st.store) < $4::int)
    ORDER BY w.last_served_at NULLS FIRST, w.store
    LIMIT $2
    FOR NO KEY UPDATE OF st SKIP LOCKED
),
-- The locked stores' releases that this statement sees, deleted and
-- returned, through the indexes whatever the statistics say (migrations 9
-- and 10: a join of `s` with the table was planned as a scan of all of it
-- when they were missing or stale; a fold with a snapshot of its own also
-- took releases committed after this statement began, and could count a
-- store below zero).
released AS (
    SELECT f.store, f.n
    FROM courier_releases_delete(courier_releases_of(ARRAY(SELECT store FROM s))) f
),
-- The store rows this claim holds: it counts only against them.
locked_stores AS (SELECT store FROM s),
ranked_stores AS (
    SELECT f.*, GREATEST(LEAST($4 - f.in_flight, ($2 + f.k - 1) / f.k), 0) AS room
    FROM (
        SELECT s.store,
               s.in_flight - coalesce((SELECT sum(x.n) FROM released x WHERE x.store = s.store), 0)
                   AS in_flight,
               row_number() OVER (ORDER BY s.last_served_at NULLS FIRST, s.store) AS store_rank,
               count(*) OVER () AS k
        FROM s) f
),
locked AS (
    SELECT rs.store, rs.store_rank, p.id
    FROM ranked_stores rs
    CROSS JOIN LATERAL (
        SELECT a.id FROM actions a
        WHERE a.store = rs.store AND a.state = 'pending'
        ORDER BY a.id
        LIMIT rs.room
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
-- The stores whose rows store_work may keep without work, for the caller
-- to sweep (courier_store_work_sweep, which checks again under a lock):
-- those this claim may have emptied (it took every action it locked, and
-- its snapshot shows no other pending action: one more probe per store),
-- and those of the first 4 rows in serving order that have no pending
-- action (rows left by a sweep that found its store locked, or by FIFO
-- claims, which sweep nothing): 4 probes per claim, so such rows cannot
-- pile up ahead of work.
-- Each probe is a LATERAL subquery with a LIMIT, in id order, as in `s`:
-- written as NOT EXISTS, the planner joined every pending action by hash
-- once stores held deep backlogs (a sequential scan of actions in every
-- claim: 250 ms with 2,000 pending in each of 100 stores; tests/plans.rs).
sweep AS (
    SELECT rs.store FROM ranked_stores rs
    LEFT JOIN LATERAL (
        SELECT a.id FROM actions a
        WHERE a.store = rs.store AND a.state = 'pending'
          AND a.id NOT IN (SELECT l.id FROM locked l WHERE l.store = rs.store)
        ORDER BY a.id LIMIT 1) more ON true
    WHERE more.id IS NULL
      AND NOT EXISTS (SELECT 1 FROM locked l
                      WHERE l.store = rs.store AND l.id NOT IN (SELECT id FROM chosen))
    UNION
    SELECT w.store FROM (
        SELECT store FROM store_work ORDER BY last_served_at NULLS FIRST, store LIMIT 4) w
    LEFT JOIN LATERAL (
        SELECT a.id FROM actions a
        WHERE a.store = w.store AND a.state = 'pending'
        ORDER BY a.id LIMIT 1) more ON true
    WHERE more.id IS NULL
),
