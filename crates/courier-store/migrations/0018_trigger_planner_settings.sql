-- courier schema, version 18: every trigger function of courier's tables
-- plans its statements with the planner settings of its own, whatever the
-- statement that fires it has set.
--
-- PL/pgSQL plans a function's statements at their first run in a session,
-- with the settings in force then, and keeps the plans. The claims run
-- with sequential scans, hash joins and merge joins off and their generic
-- plan forced, in their own transaction (sql/lease/claim_plan.sql); a claim
-- fires the triggers of `actions` (update), `outbox` (insert) and `stores`
-- (update), and when it was the first statement on its connection to fire
-- one, the trigger's plans would keep those settings for every later
-- statement on that connection: a join of a statement's two transition
-- tables (courier_ready_update, courier_held_done_update,
-- courier_watched_update), which have no index, as a nested loop, whose
-- cost grows with the square of the rows a statement changes. A setting
-- attached to a function holds while it runs, its planning included.
-- Sequential scans stay off where migration 17 turned them off, and on
-- elsewhere. tests/plans.rs checks that every trigger function on a courier
-- table pins each setting the claims change, and that a trigger function
-- without them is caught (the control).
ALTER FUNCTION courier_count_actions()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_count_events()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_count_outbox()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_count_stores()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_store_work_add()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_ready_insert()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_ready_update()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto;
ALTER FUNCTION courier_ready_delete()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto;
ALTER FUNCTION courier_held_done_insert()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_held_done_update()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto;
ALTER FUNCTION courier_held_done_delete()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto;
ALTER FUNCTION courier_watched_insert()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto;
ALTER FUNCTION courier_watched_update()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto;
ALTER FUNCTION courier_watched_delete()
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto;
