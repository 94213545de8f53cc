-- The middle of the fair claim: the least recently served stores with work,
-- room under their cap and, for a store with a rate, a whole token in its
-- bucket; one action from each in turn, oldest first within a store. The
-- stores come from `store_work` (migration 0005), walked through its index
-- in serving order, so idle stores are never visited; a store waiting for
-- tokens is passed over (one probe) and holds no slot.
-- Store rows are locked FOR NO KEY UPDATE (enough to serialize claims of one
-- store, so its bucket is debited by one claim at a time) and SKIP LOCKED;
-- enqueues lock no store row (migration 11). A locked row is read as it is
-- now, not as the snapshot saw it, so the cap and the tokens are the latest.
-- Each store locks at most its share of the batch (the budget over the
-- number of stores, rounded up), so a claim locks about as many action rows
-- as it takes. A store's cap is its own (`in_flight_max`, migration 27) or
-- the claim's ($4).
s AS (
    SELECT st.store, st.in_flight, w.last_served_at,
           coalesce(st.in_flight_max, $4::int) AS cap,
           courier_tokens(st.rate_per_s, st.burst, st.tokens, st.tokens_at,
                          coalesce($6::timestamptz, now())) AS tokens
    FROM store_work w
    JOIN stores st ON st.store = w.store
    -- One probe of actions_ready's per-store index per store (a LIMIT keeps
    -- the planner from reading every pending action to find the stores
    -- with work). actions_ready holds only pending actions (migration 12):
    -- a probe walks the dead entries of the backlog's churn, never those of
    -- history (tests/plans.rs).
    CROSS JOIN LATERAL (
        SELECT 1 FROM actions_ready p WHERE p.store = w.store
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
    WHERE (st.in_flight < coalesce(st.in_flight_max, $4::int)
           OR st.in_flight - courier_releases_unfolded(st.store)
              < coalesce(st.in_flight_max, $4::int))
      AND (st.rate_per_s IS NULL
           OR courier_tokens(st.rate_per_s, st.burst, st.tokens, st.tokens_at,
                             coalesce($6::timestamptz, now())) >= 1)
      -- No store at all while the provider is paused (one test, before the
      -- walk). The LIMIT stays the batch, a parameter: a LIMIT of the
      -- budget's subquery is planned as 10% of store_work, and the plans
      -- after it turn to scans (tests/plans.rs). With a ceiling nearly
      -- spent, the claim locks up to the batch's stores and takes from the
      -- first (`room` below).
      AND (SELECT n FROM budget) > 0
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
    SELECT f.*,
           GREATEST(LEAST(f.cap - f.in_flight,
                          ((SELECT n FROM budget) + f.k - 1) / f.k,
                          coalesce(floor(f.tokens)::bigint, f.cap)), 0) AS room
    FROM (
        SELECT s.store, s.cap, s.tokens,
               s.in_flight - coalesce((SELECT sum(x.n) FROM released x WHERE x.store = s.store), 0)
                   AS in_flight,
               row_number() OVER (ORDER BY s.last_served_at NULLS FIRST, s.store) AS store_rank,
               count(*) OVER () AS k
        FROM s) f
),
-- Each store's oldest actions in actions_ready, and their action rows
-- locked one by one as they are reached (SKIP LOCKED), re-checked as still
-- pending: a row taken by a claim that committed after this statement's
-- snapshot is re-read when locked and dropped. The lock is in a LATERAL
-- subquery, which the planner cannot merge into the walk: joined plainly,
-- with statistics of `actions` that saw nothing pending, every pending
-- action of each store was joined and sorted before the lock (38 million
-- buffers for a claim of 64 over 100 stores of 2,000; tests/plans.rs). The
-- walk passes at most the cap's worth of actions taken since the snapshot.
locked AS (
    SELECT rs.store, rs.store_rank, p.id
    FROM ranked_stores rs
    CROSS JOIN LATERAL (
        SELECT a.id
        FROM (SELECT r.id FROM actions_ready r
              WHERE r.store = rs.store
              ORDER BY r.id
              LIMIT rs.room + rs.cap) r
        CROSS JOIN LATERAL (
            SELECT a.id FROM actions a
            WHERE a.id = r.id AND a.state = 'pending'
            FOR UPDATE SKIP LOCKED) a
        LIMIT rs.room) p
),
chosen AS (
    SELECT id, store FROM (
        SELECT id, store, store_rank,
               row_number() OVER (PARTITION BY store ORDER BY id) AS turn
        FROM locked) t
    ORDER BY turn, store_rank
    LIMIT LEAST(GREATEST($2 - (SELECT count(*) FROM reclaimed), 0), (SELECT n FROM budget))
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
        SELECT r.id FROM actions_ready r
        WHERE r.store = rs.store
          AND r.id NOT IN (SELECT l.id FROM locked l WHERE l.store = rs.store)
        ORDER BY r.id LIMIT 1) more ON true
    WHERE more.id IS NULL
      AND NOT EXISTS (SELECT 1 FROM locked l
                      WHERE l.store = rs.store AND l.id NOT IN (SELECT id FROM chosen))
    UNION
    SELECT w.store FROM (
        SELECT store FROM store_work ORDER BY last_served_at NULLS FIRST, store LIMIT 4) w
    LEFT JOIN LATERAL (
        SELECT r.id FROM actions_ready r
        WHERE r.store = w.store
        ORDER BY r.id LIMIT 1) more ON true
    WHERE more.id IS NULL
),
