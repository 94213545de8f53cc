-- courier schema, version 6: counts that are maintained, not scanned.
--
-- `courier status` and the dashboard counted actions by state, intents by
-- status, events by kind and the attempts and lookups of every intent with
-- full scans: with 2,000,000 finished actions `courier status` took 1.4 s,
-- and every day of history made it slower. Now every statement that writes
-- actions, outbox, events or stores appends what it changed to
-- count_deltas (statement-level triggers over the transition tables, so a
-- statement of 1,000 rows appends a handful of rows, and the statements in
-- sql/ are unchanged), in the same transaction as the change. Readers sum
-- `counts` and the deltas (the view counts_now): one snapshot, so the
-- figures are exact and agree with each other. The pruner folds the deltas
-- into `counts` (sql/counts/fold.sql) under its advisory lock, deleting
-- exactly the deltas it adds.
--
-- No writer waits here: count_deltas is insert-only for writers (no index,
-- no key, no foreign key), and only the one folder deletes from it and
-- updates `counts`. Removing a row (the pruner) counts down through the
-- same triggers.
--
-- Names: 'actions.<state>', 'outbox.<status>', 'outbox.attempts',
-- 'outbox.lookups', 'events.<kind>', 'stores'.

CREATE TABLE counts (
    name text PRIMARY KEY,
    n    bigint NOT NULL
);

CREATE TABLE count_deltas (
    name text NOT NULL,
    n    bigint NOT NULL
);

CREATE VIEW counts_now AS
SELECT name, sum(n)::bigint AS n
FROM (SELECT name, n FROM counts UNION ALL SELECT name, n FROM count_deltas) c
GROUP BY name;

-- One function per table; TG_OP picks the transition tables that exist
-- (PL/pgSQL plans a statement only when it runs, so a branch never refers to
-- a table its trigger lacks).
CREATE FUNCTION courier_count_actions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (name, n)
        SELECT 'actions.' || state, count(*) FROM new_rows GROUP BY state;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO count_deltas (name, n)
        SELECT name, sum(d) FROM (
            SELECT 'actions.' || state AS name, 1 AS d FROM new_rows
            UNION ALL SELECT 'actions.' || state, -1 FROM old_rows) x
        GROUP BY name HAVING sum(d) <> 0;
    ELSE
        INSERT INTO count_deltas (name, n)
        SELECT 'actions.' || state, -count(*) FROM old_rows GROUP BY state;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION courier_count_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (name, n)
        SELECT name, sum(d) FROM (
            SELECT 'outbox.' || status AS name, 1::bigint AS d FROM new_rows
            UNION ALL SELECT 'outbox.attempts', attempts FROM new_rows
            UNION ALL SELECT 'outbox.lookups', lookups FROM new_rows) x
        GROUP BY name HAVING sum(d) <> 0;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO count_deltas (name, n)
        SELECT name, sum(d) FROM (
            SELECT 'outbox.' || status AS name, 1::bigint AS d FROM new_rows
            UNION ALL SELECT 'outbox.attempts', attempts FROM new_rows
            UNION ALL SELECT 'outbox.lookups', lookups FROM new_rows
            UNION ALL SELECT 'outbox.' || status, -1 FROM old_rows
            UNION ALL SELECT 'outbox.attempts', -attempts FROM old_rows
            UNION ALL SELECT 'outbox.lookups', -lookups FROM old_rows) x
        GROUP BY name HAVING sum(d) <> 0;
    ELSE
        INSERT INTO count_deltas (name, n)
        SELECT name, -sum(d) FROM (
            SELECT 'outbox.' || status AS name, 1::bigint AS d FROM old_rows
            UNION ALL SELECT 'outbox.attempts', attempts FROM old_rows
            UNION ALL SELECT 'outbox.lookups', lookups FROM old_rows) x
        GROUP BY name HAVING sum(d) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION courier_count_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (name, n)
        SELECT 'events.' || kind, count(*) FROM new_rows GROUP BY kind;
    ELSE
        INSERT INTO count_deltas (name, n)
        SELECT 'events.' || kind, -count(*) FROM old_rows GROUP BY kind;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION courier_count_stores() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (name, n) SELECT 'stores', count(*) FROM new_rows HAVING count(*) > 0;
    ELSE
        INSERT INTO count_deltas (name, n) SELECT 'stores', -count(*) FROM old_rows HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END $$;

-- A trigger with transition tables serves one event, so three per table.
-- The counts start from the rows already there: the triggers and the first
-- count are made in this one transaction, whose CREATE TRIGGER locks keep
-- writers out until it commits (a scan of each table: on a large live
-- database, apply it at a quiet moment).
CREATE TRIGGER actions_count_insert AFTER INSERT ON actions
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_actions();
CREATE TRIGGER actions_count_update AFTER UPDATE ON actions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_count_actions();
CREATE TRIGGER actions_count_delete AFTER DELETE ON actions
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_actions();
CREATE TRIGGER outbox_count_insert AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_outbox();
CREATE TRIGGER outbox_count_update AFTER UPDATE ON outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION courier_count_outbox();
CREATE TRIGGER outbox_count_delete AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_outbox();
CREATE TRIGGER events_count_insert AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_events();
CREATE TRIGGER events_count_delete AFTER DELETE ON events
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_events();
CREATE TRIGGER stores_count_insert AFTER INSERT ON stores
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_stores();
CREATE TRIGGER stores_count_delete AFTER DELETE ON stores
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_stores();

INSERT INTO counts (name, n)
SELECT 'actions.' || state, count(*) FROM actions GROUP BY state
UNION ALL SELECT 'outbox.' || status, count(*) FROM outbox GROUP BY status
UNION ALL SELECT 'outbox.attempts', coalesce(sum(attempts), 0) FROM outbox
UNION ALL SELECT 'outbox.lookups', coalesce(sum(lookups), 0) FROM outbox
UNION ALL SELECT 'events.' || kind, count(*) FROM events GROUP BY kind
UNION ALL SELECT 'stores', count(*) FROM stores;
