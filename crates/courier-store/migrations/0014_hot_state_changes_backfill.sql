-- courier:no-transaction
-- courier schema, version 14: the second half of version 13, outside any
-- transaction, so that the workers of a live database never wait for it.
--
-- The finished actions already in the history go into actions_done. One
-- statement, as long as the history (`courier db migrate` applied 13 and 14
-- to 10,100,000 finished actions in 102 s on a 2-core machine, most of it
-- here); it takes no lock a writer waits for, and actions
-- finishing meanwhile are written by the trigger (ON CONFLICT: whichever
-- comes second does nothing). Safe to repeat.
INSERT INTO actions_done (done_at, id)
SELECT done_at, id FROM actions
WHERE state IN ('done', 'failed') AND done_at IS NOT NULL
ON CONFLICT DO NOTHING;
-- Nothing reads the two partial indexes any more (the reclaim, the owners'
-- report and the dashboard read actions_held; the pruner actions_done).
-- Dropped concurrently: each waits for the transactions that use them and
-- holds no lock a writer waits for.
DROP INDEX CONCURRENTLY IF EXISTS actions_finished;
DROP INDEX CONCURRENTLY IF EXISTS actions_lease;
-- Room on each new page for the versions of its rows' state changes (a
-- claim, a settle, a finishing merge, heartbeats), so that they stay HOT.
-- Applies to pages written from now on; rewrites nothing.
ALTER TABLE actions SET (fillfactor = 80);
