-- Removes from store_work the given stores that have no pending action
-- (and folds their releases), never waiting for a lock: see
-- courier_store_work_sweep (migration 0005). $1 stores. The stores removed.
SELECT courier_store_work_sweep($1::text[]) AS removed
