-- BROKEN ON PURPOSE, for tests/store_work.rs only: the sweep as one would
-- first write it, checking for pending work in the same statement (so with
-- the same snapshot) as it deletes, with no lock on the store row. It cannot
-- see an enqueue still open, nor one that commits while it runs, and
-- removes a store that has work. $1 stores.
WITH gone AS (
    DELETE FROM store_work w
    WHERE w.store = ANY ($1::text[])
      AND NOT EXISTS (SELECT 1 FROM actions_ready r WHERE r.store = w.store)
    RETURNING w.store
)
SELECT coalesce(array_agg(store), ARRAY[]::text[]) AS removed FROM gone
