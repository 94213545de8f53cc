-- Removes from store_work the given stores that have no pending action
-- (and folds their releases), never waiting for a lock: see
-- courier_store_work_sweep, as it stands in schema.sql (defined by migration
-- 0005, last redefined by 0012, which checks actions_ready). $1 stores. The
-- stores removed.
SELECT courier_store_work_sweep($1::text[]) AS removed
