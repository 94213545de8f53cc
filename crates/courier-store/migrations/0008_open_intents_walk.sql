-- courier schema, version 8: the count of open intents past the age alert,
-- walked from the oldest and stopped at a cap, whatever the planner thinks.
--
-- The reports counted every open intent (`count(*) ... WHERE NOT final`).
-- On a database holding 10,000,000 finished actions with 100,000 intents
-- awaiting their webhooks, that count read 82,000 pages in 440-600 ms: a
-- bitmap scan of outbox_open visits every open intent and every entry that
-- settled intents left dead in the index (490,000), and, unlike an index
-- scan, marks none of them dead for the next reader. How many are open now
-- comes from the maintained counts (migration 6); how many are past the
-- alert is counted up to a cap by a walk of the oldest, through outbox_open
-- in created_at order, that stops at the cap.
--
-- With fewer open intents estimated than the cap, the planner sees the
-- LIMIT as not binding and picks the bitmap scan and a sort anyway
-- (tests/open_intents.rs shows it). A function's SET clauses hold for its
-- own statements only, so here, and nowhere else, bitmap and sequential
-- scans are off: the one plan left is the ordered index scan.
CREATE FUNCTION courier_open_intents_past(age_s float8, counted_max bigint) RETURNS bigint
    LANGUAGE sql STABLE
    SET enable_bitmapscan = off
    SET enable_seqscan = off
    -- Were the index ever missing, the plan left would carry the planner's
    -- cost for a disabled node, which is high enough to compile it with JIT:
    -- 300 ms at every call instead of a slow scan.
    SET jit = off
    AS $$
        SELECT count(*) FROM (
            SELECT 1 FROM outbox
            WHERE NOT courier_status_is_final(status)
              AND created_at < now() - age_s * interval '1 second'
            ORDER BY created_at
            LIMIT counted_max) o
    $$;
