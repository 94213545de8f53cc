-- courier schema, version 13: the held leases and the finished actions in
-- tables of their own, so that a change of an action's state can be a HOT
-- update (heap-only: no new entry in any index of `actions`).
--
-- Before: the partial indexes `actions_lease` (lease_until WHERE state =
-- 'claimed') and `actions_finished` (done_at WHERE state IN ('done',
-- 'failed')) name `state`, `lease_until` and `done_at`, so every claim,
-- heartbeat, settle, failure and finishing merge was an update that wrote a
-- new entry into every index of `actions`: the primary key, `actions_uid_key`
-- and those two, each as large as the history. With 10,000,000 finished
-- actions a merge batch of 64 read 3,550-3,700 buffers against 3,150-3,450
-- on an empty database (`courier bench history`, docs/benchmarks.md), and
-- the dead entries those updates left were walked by the next readers
-- until a vacuum of the whole table, which autovacuum starts only after 20%
-- of its rows.
--
-- Now the indexes of `actions` name only columns that never change (id,
-- uid, store, client_key), so an update is HOT whenever its page has room
-- (version 14 leaves a fifth of each new page free), and the page's dead
-- versions are pruned by the next reader of the page, without a vacuum.
-- - `actions_held`: one row per claimed action (its store, owner, epoch and
--   lease), what the reclaim, the owners' report and the dashboard read.
--   Its size follows the actions in flight, not history.
-- - `actions_done`: one row (done_at, id) per finished action, what the
--   pruner walks, oldest first. It grows with history, but only by inserts
--   at its end and the pruner's deletes at its start.
--
-- The invariants: a committed action is 'claimed' if and only if it has a
-- committed row in actions_held with the same store, owner, epoch and
-- lease; it is final (done or failed) with a done_at if and only if
-- actions_done holds (done_at, id). Statement triggers on `actions` keep
-- both in the transaction of each change, whatever the writer, next to
-- those of `actions_ready`. `PgStore::actions_side_mismatch` is the checker
-- (tests/actions_ready.rs races it, and catches the update and the delete
-- trigger disabled on purpose).
--
-- The tables are new, so their indexes need no CONCURRENTLY. Creating the
-- first trigger takes SHARE ROW EXCLUSIVE on actions until commit, so the
-- backfill of the held leases (the actions in flight, through
-- `actions_lease`) misses none. The finished actions (as many as the
-- history) are backfilled by version 14, outside any transaction, so that
-- writers never wait for it; until then the pruner sees only the actions
-- finished since this version, which only delays pruning.

CREATE TABLE actions_held (
    id          bigint PRIMARY KEY,
    store       text NOT NULL,
    owner       text NOT NULL,
    epoch       bigint NOT NULL,
    lease_until timestamptz NOT NULL
);
-- The reclaim's walk: the lease that ran out longest ago first.
CREATE INDEX actions_held_lease ON actions_held (lease_until);

CREATE TABLE actions_done (
    done_at timestamptz NOT NULL,
    id      bigint NOT NULL,
    PRIMARY KEY (done_at, id)
);

CREATE FUNCTION courier_held_done_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO actions_held (id, store, owner, epoch, lease_until)
    SELECT id, store, owner, epoch, lease_until FROM added WHERE state = 'claimed';
    INSERT INTO actions_done (done_at, id)
    SELECT done_at, id FROM added
    WHERE state IN ('done', 'failed') AND done_at IS NOT NULL;
    RETURN NULL;
END $$;

CREATE FUNCTION courier_held_done_update() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    -- Leases: gone when the action leaves 'claimed'; written when it enters
    -- it or its owner, epoch or lease changes (a reclaim, a heartbeat).
    DELETE FROM actions_held h
    USING old_rows o JOIN new_rows n ON n.id = o.id
    WHERE h.id = o.id AND o.state = 'claimed' AND n.state <> 'claimed';
    INSERT INTO actions_held AS h (id, store, owner, epoch, lease_until)
    SELECT n.id, n.store, n.owner, n.epoch, n.lease_until
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.state = 'claimed'
      AND (o.state <> 'claimed'
           OR (o.owner, o.epoch, o.lease_until) IS DISTINCT FROM (n.owner, n.epoch, n.lease_until))
    ON CONFLICT (id) DO UPDATE
        SET store = excluded.store, owner = excluded.owner, epoch = excluded.epoch,
            lease_until = excluded.lease_until;
    -- Finished actions: written when an action becomes final (nothing moves
    -- one back, nor changes its done_at; both are handled all the same).
    DELETE FROM actions_done d
    USING old_rows o JOIN new_rows n ON n.id = o.id
    WHERE d.done_at = o.done_at AND d.id = o.id
      AND o.state IN ('done', 'failed')
      AND (n.state NOT IN ('done', 'failed') OR n.done_at IS DISTINCT FROM o.done_at);
    INSERT INTO actions_done (done_at, id)
    SELECT n.done_at, n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.state IN ('done', 'failed') AND n.done_at IS NOT NULL
      AND (o.state NOT IN ('done', 'failed') OR o.done_at IS DISTINCT FROM n.done_at)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE FUNCTION courier_held_done_delete() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM actions_held h USING old_rows o
    WHERE h.id = o.id AND o.state = 'claimed';
    DELETE FROM actions_done d USING old_rows o
    WHERE d.done_at = o.done_at AND d.id = o.id AND o.state IN ('done', 'failed');
    RETURN NULL;
END $$;

CREATE TRIGGER actions_held_done_insert AFTER INSERT ON actions
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION courier_held_done_insert();
CREATE TRIGGER actions_held_done_update AFTER UPDATE ON actions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_held_done_update();
CREATE TRIGGER actions_held_done_delete AFTER DELETE ON actions
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_held_done_delete();

INSERT INTO actions_held (id, store, owner, epoch, lease_until)
SELECT id, store, owner, epoch, lease_until FROM actions WHERE state = 'claimed';
