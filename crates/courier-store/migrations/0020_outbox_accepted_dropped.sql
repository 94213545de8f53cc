-- courier:no-transaction
-- courier schema, version 20: the second half of version 19, outside any
-- transaction. Nothing reads the index `outbox_accepted` any more (the
-- sampler walks outbox_accepts); dropped concurrently, it waits for the
-- transactions that use it and holds no lock a writer waits for. Without
-- it no index of `outbox` names a column a settle or a merge writes, so
-- both are HOT updates when the page has room (fillfactor 80, version 16).
DROP INDEX CONCURRENTLY IF EXISTS outbox_accepted;
