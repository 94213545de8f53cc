-- courier:no-transaction
-- courier schema, version 16: the second half of version 15, outside any
-- transaction. Nothing reads the partial indexes `outbox_open` and
-- `outbox_next_check` any more (intents_watched replaced both); dropped
-- concurrently, each waits for the transactions that use them and holds no
-- lock a writer waits for.
DROP INDEX CONCURRENTLY IF EXISTS outbox_open;
DROP INDEX CONCURRENTLY IF EXISTS outbox_next_check;
-- Room on each new page for the versions of an intent's counted attempts,
-- its settle and its merge, so that those that change no indexed column
-- (the attempts, the merge) stay HOT. Applies to pages written from now on.
ALTER TABLE outbox SET (fillfactor = 80);
