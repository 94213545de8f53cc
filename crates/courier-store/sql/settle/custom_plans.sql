-- The settle's two statements (settle/lock, settle/write) are planned for
-- each batch, never from a generic plan cached while the tables were small
-- (see src/settle.rs). For this transaction only.
SET LOCAL plan_cache_mode = force_custom_plan
