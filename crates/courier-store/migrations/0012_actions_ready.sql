-- courier schema, version 12: the pending actions in a table of their own,
-- so that what the claims walk does not grow with history.
--
-- Before: the claims found pending work through partial indexes of
-- `actions` (`actions_pending_by_store`, `actions_pending_fifo`). Every
-- claim leaves a dead entry in them, and a store's probe walks its dead
-- entries before its first pending action until a vacuum of `actions`
-- removes them. Autovacuum comes after a share of the table's rows (20%):
-- with 10,000,000 finished actions, after 2,000,000 dead rows, and each of
-- its passes reads every index of the history. With that history the fair
-- claim of 64 read 13,000-15,900 buffers against 4,700-5,800 on an empty
-- database, and claim to settle ran at 0.69-0.77x of the empty database's
-- rate (`courier bench history`, docs/benchmarks.md). Vacuuming `actions`
-- after a fixed number of dead rows instead kept the claims up (1.02x) but
-- read about 1 GB of history indexes every 25 s, and webhook merges fell to
-- 0.78x.
--
-- Now `actions_ready` holds one row (id, store) per pending action and
-- nothing else. Its size follows the backlog, so autovacuum's share of it
-- comes after the churn of the backlog, whatever the history, and each pass
-- reads only the backlog's pages. The claims probe it and lock the action
-- rows it names (FOR UPDATE OF actions SKIP LOCKED, re-checking that the
-- action is still pending), as they locked the rows of the partial indexes
-- before.
--
-- The invariant: a committed action is pending if and only if it has a
-- committed row here. Triggers on `actions` keep it, in the transaction of
-- the change, whatever the writer (the enqueue, a claim, a bulk load, a
-- test's INSERT): an insert of pending actions adds their rows; an update
-- that takes actions out of 'pending' removes them (and one that would set
-- an action back to 'pending', which nothing does, adds them); a delete
-- removes them. `PgStore::actions_ready_mismatch` is the checker
-- (tests/actions_ready.rs runs it under concurrent enqueues and claims, and
-- with the update trigger disabled, which it catches).
--
-- The partial indexes go: nothing reads them any more, and a planner
-- working from statistics taken when nothing was pending chose to walk one
-- whole (tests/plans.rs keeps that as its negative control). The checkers of
-- this invariant and of store_work's read `actions` itself.
--
-- The table is new, so its indexes need no CONCURRENTLY. Creating the first
-- trigger takes SHARE ROW EXCLUSIVE on actions (held until commit), so the
-- backfill below sees every committed pending action and no write slips
-- between it and the triggers; writes to actions wait for the backfill
-- (one pass over the pending index).

CREATE TABLE actions_ready (
    id    bigint PRIMARY KEY,
    store text NOT NULL
);
-- A store's pending actions, oldest first: the fair claim's probes.
CREATE INDEX actions_ready_store ON actions_ready (store, id);

CREATE FUNCTION courier_ready_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO actions_ready (id, store)
    SELECT id, store FROM added WHERE state = 'pending';
    RETURN NULL;
END $$;

CREATE FUNCTION courier_ready_update() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    -- Only rows whose state changed (`id` never changes).
    DELETE FROM actions_ready r
    USING old_rows o JOIN new_rows n ON n.id = o.id
    WHERE r.id = o.id AND o.state = 'pending' AND n.state <> 'pending';
    INSERT INTO actions_ready (id, store)
    SELECT n.id, n.store FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.state = 'pending' AND o.state <> 'pending';
    RETURN NULL;
END $$;

CREATE FUNCTION courier_ready_delete() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM actions_ready r
    USING old_rows o
    WHERE r.id = o.id AND o.state = 'pending';
    RETURN NULL;
END $$;

CREATE TRIGGER actions_ready_insert AFTER INSERT ON actions
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION courier_ready_insert();
CREATE TRIGGER actions_ready_update AFTER UPDATE ON actions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_ready_update();
CREATE TRIGGER actions_ready_delete AFTER DELETE ON actions
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_ready_delete();

INSERT INTO actions_ready (id, store)
SELECT id, store FROM actions WHERE state = 'pending';

-- No scan: each takes ACCESS EXCLUSIVE on actions for a moment (writes
-- already wait for the backfill above).
DROP INDEX IF EXISTS actions_pending_by_store;
DROP INDEX IF EXISTS actions_pending_fifo;

-- The sweep of migration 11, checking for pending work in actions_ready
-- (same locks, same snapshot after them).
CREATE OR REPLACE FUNCTION courier_store_work_sweep(candidates text[]) RETURNS text[]
    LANGUAGE plpgsql AS $$
DECLARE
    rows_held text[];
    held text[];
    removed text[];
BEGIN
    SELECT array_agg(x.store) INTO rows_held FROM (
        SELECT st.store FROM stores st
        WHERE st.store = ANY (candidates)
        ORDER BY st.store
        FOR UPDATE SKIP LOCKED) x;
    IF rows_held IS NULL THEN
        RETURN ARRAY[]::text[];
    END IF;
    SELECT array_agg(h.store ORDER BY h.store) INTO held
    FROM unnest(rows_held) AS h(store)
    WHERE pg_try_advisory_xact_lock(7, hashtext(h.store));
    IF held IS NULL THEN
        RETURN ARRAY[]::text[];
    END IF;
    WITH gone AS (
        DELETE FROM store_work w
        WHERE w.store = ANY (held)
          AND NOT EXISTS (SELECT 1 FROM actions_ready r WHERE r.store = w.store)
        RETURNING w.store
    ), folded AS (
        SELECT f.store, f.n
        FROM courier_releases_delete(courier_releases_of(ARRAY(SELECT store FROM gone))) f
    ), counted AS (
        UPDATE stores st SET in_flight = st.in_flight - f.n
        FROM (SELECT store, sum(n)::int AS n FROM folded GROUP BY store) f
        WHERE st.store = f.store
    )
    SELECT coalesce(array_agg(store), ARRAY[]::text[]) INTO removed FROM gone;
    RETURN removed;
END $$;
