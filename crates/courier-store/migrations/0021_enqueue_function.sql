-- courier schema, version 21: one enqueue for every caller.
--
-- courier.enqueue (one action) and courier.enqueue_many (its set form) are
-- the only way actions get in: the HTTP API, the Rust library, the
-- benchmarks' backlogs and the public benchmark's adapter call them, and so
-- can an application in any language, inside its own transaction (the
-- outbox pattern). Each checks every field with courier.enqueue_problem, the
-- one definition of what a valid action is, and is idempotent on
-- (store, key).
--
-- Errors, each with a stable SQLSTATE:
-- - 22023 invalid_parameter_value: a field out of its limits. The error's
--   COLUMN names the field (store, to, body, key; items for the arrays of
--   the set form), its CONSTRAINT a stable code (bad_store, bad_phone,
--   empty_body, body_too_long, bad_key, bad_items), and, in the set form,
--   its DETAIL the item ("item=N", the 1-based array subscript).
-- - QC001 (courier: key reused): the (store, key) names an action with
--   another recipient or body, or an earlier item of the same call does.
--   DETAIL: "item=N" in the set form, and "existing=ID" when the action
--   exists.
-- - 54000 program_limit_exceeded: a set of more than 10,000 items.
-- - 40001 serialization_failure: an action with the same (store, key) was
--   committed by a concurrent enqueue after this statement's snapshot
--   (possible only outside READ COMMITTED): retry.
--
-- The functions run with the search_path of this migration, so a caller
-- whose own search_path differs still reaches courier's tables.

CREATE SCHEMA IF NOT EXISTS courier;

-- A UUIDv7 (the milliseconds since the epoch in the first 48 bits, version
-- 7, the rest random): an action's uid, from which its idempotency key is
-- derived. Time-ordered, so a new action's entries in the uid and key
-- indexes land on their rightmost pages, which stay in cache.
CREATE FUNCTION courier.uuid_v7() RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- What is wrong with one action, or NULL: {field, code, message}. The one
-- definition of a valid action (courier_core::BODY_CHARS_MAX is its body
-- limit, KEY_LEN_MAX its key's; tests/enqueue.rs keeps them equal):
-- - store: 1 to 64 characters of A-Z a-z 0-9 - _ .
-- - to: E.164, '+' and 8 to 15 digits, the first not 0
-- - body: 1 to 1,600 characters (the contract's limit)
-- - key (optional): 1 to 255 printable ASCII characters
-- (NUL cannot reach PostgreSQL's text at all.) Every function it calls is
-- immutable (no format(), which is stable), so the planner inlines it into
-- the caller's expression instead of running it as a function of its own
-- at every call. The patterns have no
-- bounded repetition ({1,64}): PostgreSQL's regex engine expands one into
-- as many copies, which made a match ten times slower; lengths are checked
-- apart.
-- A store's name, alone (a token names stores too): NULL when valid.
CREATE FUNCTION courier.store_problem(store text)
    RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN store IS NULL OR length(store) > 64 OR store !~ '^[A-Za-z0-9._-]+$' THEN
        ARRAY['store', 'bad_store', 'store must be 1..64 characters of A-Z a-z 0-9 - _ .']
    END
$$;

CREATE FUNCTION courier.enqueue_problem(store text, recipient text, body text, key text)
    RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN courier.store_problem(store) IS NOT NULL THEN courier.store_problem(store)
        WHEN recipient IS NULL OR length(recipient) NOT BETWEEN 9 AND 16
             OR recipient !~ '^\+[1-9][0-9]+$' THEN
            ARRAY['to', 'bad_phone', 'phone number must be E.164: ''+'' and 8 to 15 digits, e.g. +15551234567']
        WHEN body IS NULL OR body = '' THEN
            ARRAY['body', 'empty_body', 'body must not be empty']
        WHEN char_length(body) > 1600 THEN
            ARRAY['body', 'body_too_long',
                  'body has ' || char_length(body)::text || ' characters; the limit is 1600']
        WHEN key = '' THEN
            ARRAY['key', 'bad_key', 'idempotency key is empty']
        WHEN octet_length(key) > 255 THEN
            ARRAY['key', 'bad_key', 'idempotency key is longer than 255 characters']
        WHEN key !~ '^[ -~]+$' THEN
            ARRAY['key', 'bad_key', 'idempotency key must be printable ASCII']
    END
$$;

-- Enqueues one action; returns its id and whether this call created it (a
-- repeat of the same (store, key) with the same recipient and body returns
-- the first action's id and false). The store is registered on its first
-- action. One statement: `SELECT * FROM courier.enqueue($1, $2, $3, $4)`.
CREATE FUNCTION courier.enqueue(store text, recipient text, body text, key text DEFAULT NULL)
    RETURNS TABLE (id bigint, created boolean)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    problem text[] := courier.enqueue_problem(enqueue.store, enqueue.recipient,
                                              enqueue.body, enqueue.key);
    made bigint;
    old record;
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = problem[1] || ': ' || problem[3],
            COLUMN = problem[1], CONSTRAINT = problem[2];
    END IF;
    INSERT INTO stores (store) VALUES (enqueue.store) ON CONFLICT (store) DO NOTHING;
    INSERT INTO actions (uid, store, client_key, recipient, body)
    VALUES (courier.uuid_v7(), enqueue.store, enqueue.key, enqueue.recipient, enqueue.body)
    ON CONFLICT (store, client_key) WHERE client_key IS NOT NULL DO NOTHING
    RETURNING actions.id INTO made;
    IF made IS NOT NULL THEN
        RETURN QUERY SELECT made, true;
        RETURN;
    END IF;
    -- A conflict: only an action with this (store, key) causes one.
    SELECT a.id, a.recipient, a.body INTO old FROM actions a
    WHERE a.store = enqueue.store AND a.client_key = enqueue.key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = 'an action with this (store, key) was enqueued concurrently '
                      'and is not visible to this transaction: retry';
    END IF;
    IF (old.recipient, old.body) IS DISTINCT FROM (enqueue.recipient, enqueue.body) THEN
        RAISE EXCEPTION USING ERRCODE = 'QC001',
            MESSAGE = format('key: already used for action %s with a different request', old.id),
            COLUMN = 'key', CONSTRAINT = 'key_reused', DETAIL = format('existing=%s', old.id);
    END IF;
    RETURN QUERY SELECT old.id, false;
END $$;

-- The set form: enqueues the items (the arrays' elements at one subscript;
-- keys may be NULL for no keys at all) in one statement, all or nothing,
-- with the checks and the idempotency of courier.enqueue, repeats inside
-- the call included (a later item with an earlier item's (store, key) and
-- content is a repeat of it). Returns one row per item, in order: its
-- 1-based subscript, the action's id, and whether this call created it.
CREATE FUNCTION courier.enqueue_many(stores text[], recipients text[], bodies text[],
                                     keys text[] DEFAULT NULL)
    RETURNS TABLE (item integer, id bigint, created boolean)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(cardinality(stores), 0);
    bad record;
    made_items integer[];
    made_ids bigint[];
BEGIN
    IF coalesce(cardinality(recipients), 0) <> n OR coalesce(cardinality(bodies), 0) <> n
       OR (keys IS NOT NULL AND cardinality(keys) <> n) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'items: stores, recipients, bodies and keys must have the same length',
            COLUMN = 'items', CONSTRAINT = 'bad_items';
    END IF;
    IF n > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded',
            MESSAGE = format('items: %s items; at most 10000 in one call', n),
            COLUMN = 'items', CONSTRAINT = 'too_many_items';
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;

    -- The first item out of its limits.
    SELECT t.i, p.p INTO bad
    FROM unnest(stores, recipients, bodies, keys) WITH ORDINALITY AS t(s, r, b, k, i),
         LATERAL (SELECT courier.enqueue_problem(t.s, t.r, t.b, t.k) AS p) p
    WHERE p.p IS NOT NULL
    ORDER BY t.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('item %s, %s: %s', bad.i, bad.p[1], bad.p[3]),
            COLUMN = bad.p[1], CONSTRAINT = bad.p[2], DETAIL = format('item=%s', bad.i);
    END IF;

    -- The first item that repeats an earlier item's (store, key) with
    -- other content.
    SELECT x.i, x.i0 INTO bad FROM (
        SELECT t.i, t.r, t.b,
               first_value(t.i) OVER w AS i0, first_value(t.r) OVER w AS r0,
               first_value(t.b) OVER w AS b0
        FROM unnest(stores, recipients, bodies, keys) WITH ORDINALITY AS t(s, r, b, k, i)
        WHERE t.k IS NOT NULL
        WINDOW w AS (PARTITION BY t.s, t.k ORDER BY t.i)) x
    WHERE (x.r, x.b) IS DISTINCT FROM (x.r0, x.b0)
    ORDER BY x.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'QC001',
            MESSAGE = format('item %s, key: already used by item %s of this call with a different request',
                             bad.i, bad.i0),
            COLUMN = 'key', CONSTRAINT = 'key_reused', DETAIL = format('item=%s', bad.i);
    END IF;

    -- The stores, in name order (concurrent calls registering the same new
    -- stores wait for each other in one order).
    INSERT INTO stores (store)
    SELECT DISTINCT s.s FROM unnest(stores) AS s(s) ORDER BY 1
    ON CONFLICT (store) DO NOTHING;

    -- Each item that is the first of its (store, key), or has no key, in
    -- item order.
    WITH firsts AS MATERIALIZED (
        SELECT f.i, f.s, f.r, f.b, f.k, courier.uuid_v7() AS uid FROM (
            SELECT t.*, row_number() OVER (PARTITION BY t.s, t.k ORDER BY t.i) AS nth
            FROM unnest(stores, recipients, bodies, keys) WITH ORDINALITY AS t(s, r, b, k, i)) f
        WHERE f.k IS NULL OR f.nth = 1
    ), made AS (
        INSERT INTO actions (uid, store, client_key, recipient, body)
        SELECT f.uid, f.s, f.k, f.r, f.b FROM firsts f ORDER BY f.i
        ON CONFLICT (store, client_key) WHERE client_key IS NOT NULL DO NOTHING
        RETURNING actions.id, actions.uid
    )
    SELECT array_agg(f.i::integer ORDER BY f.i), array_agg(m.id ORDER BY f.i)
    INTO made_items, made_ids
    FROM firsts f JOIN made m ON m.uid = f.uid;

    -- A first that was not made met an existing action (in a new snapshot,
    -- which sees an enqueue committed since the insert's): the same content
    -- is that action, other content an error.
    SELECT x.i, a.id AS existing INTO bad FROM (
        SELECT t.i, t.s, t.k, t.r, t.b,
               first_value(t.i) OVER (PARTITION BY t.s, t.k ORDER BY t.i) AS i0
        FROM unnest(stores, recipients, bodies, keys) WITH ORDINALITY AS t(s, r, b, k, i)
        WHERE t.k IS NOT NULL) x
    LEFT JOIN unnest(made_items) AS m(i) ON m.i = x.i0
    LEFT JOIN actions a ON a.store = x.s AND a.client_key = x.k
    WHERE m.i IS NULL
      AND (a.id IS NULL OR (a.recipient, a.body) IS DISTINCT FROM (x.r, x.b))
    ORDER BY x.i LIMIT 1;
    IF FOUND THEN
        IF bad.existing IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
                MESSAGE = format('item %s: an action with this (store, key) was enqueued '
                                 'concurrently and is not visible to this transaction: retry', bad.i);
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'QC001',
            MESSAGE = format('item %s, key: already used for action %s with a different request',
                             bad.i, bad.existing),
            COLUMN = 'key', CONSTRAINT = 'key_reused',
            DETAIL = format('item=%s existing=%s', bad.i, bad.existing);
    END IF;

    RETURN QUERY
    WITH t AS (
        SELECT u.i::integer AS i, u.s, u.k,
               CASE WHEN u.k IS NULL THEN u.i
                    ELSE first_value(u.i) OVER (PARTITION BY u.s, u.k ORDER BY u.i) END AS i0
        FROM unnest(stores, keys) WITH ORDINALITY AS u(s, k, i)
    ), m AS (
        SELECT * FROM unnest(made_items, made_ids) AS m(i, id)
    )
    SELECT t.i, coalesce(m.id, a.id), m.id IS NOT NULL AND t.i = t.i0
    FROM t LEFT JOIN m ON m.i = t.i0
    LEFT JOIN actions a ON m.id IS NULL AND a.store = t.s AND a.client_key = t.k
    ORDER BY t.i;
END $$;
