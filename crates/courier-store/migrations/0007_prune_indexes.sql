-- courier:no-transaction
-- courier schema, version 7: the indexes the pruner and the dashboard's sample walk,
-- built without blocking writes.
--
-- The runner runs a migration whose first line is `-- courier:no-transaction`
-- one statement at a time outside any transaction (src/migrate.rs), so
-- CREATE INDEX CONCURRENTLY can build an index while workers write. A build
-- cut short leaves an INVALID index; each CREATE is preceded by a DROP of the
-- same name, so the runner can simply run the migration again (it is
-- recorded only after its last statement).
--
-- actions_finished: the pruner takes the finished actions that finished
-- longest ago (sql/prune/actions.sql) without a walk of the whole table.
DROP INDEX CONCURRENTLY IF EXISTS actions_finished;
CREATE INDEX CONCURRENTLY actions_finished ON actions (done_at) WHERE state IN ('done', 'failed');
-- webhook_events_received: the pruner takes the oldest event ids.
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_received;
CREATE INDEX CONCURRENTLY webhook_events_received ON webhook_events (received_at);
-- outbox_accepted: the dashboard's sampler walks the accepted intents after
-- its cursor (views.rs, accepted_latencies); without it each sample read
-- the whole outbox.
DROP INDEX CONCURRENTLY IF EXISTS outbox_accepted;
CREATE INDEX CONCURRENTLY outbox_accepted ON outbox (accepted_at, action_id)
    WHERE accepted_at IS NOT NULL;
-- events_kind_id replaces events_kind: the dashboard's newest events of a
-- kind are the first entries of that kind in this index, read backwards.
DROP INDEX CONCURRENTLY IF EXISTS events_kind_id;
CREATE INDEX CONCURRENTLY events_kind_id ON events (kind, id);
DROP INDEX CONCURRENTLY IF EXISTS events_kind;
