-- The planner settings of a claim's or a settle's transaction (see
-- PLAN_BY_KEY in src/plan.rs): each statement's generic plan, made once per
-- connection instead of a plan per call, and reached by key: no sequential
-- scan, hash join or merge join, which a generic plan made while the tables
-- were young kept using as they grew (tests/plans.rs). For this transaction
-- only.
SET LOCAL plan_cache_mode = force_generic_plan;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_hashjoin = off;
SET LOCAL enable_mergejoin = off
