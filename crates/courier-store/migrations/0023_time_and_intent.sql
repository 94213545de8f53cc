-- courier schema, version 23: time and intent. An action may wait for a
-- time (`not_before`), may have a deadline after which it must not go out
-- at all (`expires_at`), may be cancelled while no worker holds it, and a
-- refused one may be re-driven as a new action.
--
-- The new states:
-- - 'scheduled': enqueued with a `not_before` still ahead. Claims never see
--   it: they walk `actions_ready`, which holds pending actions only.
--   `courier.promote_due` moves due ones to 'pending' (in batches, oldest
--   first, the workers call it a few times a second), walking
--   `actions_scheduled` by time, so a million actions scheduled for tomorrow
--   cost today's claims and promotions nothing (tests/schedule_plans.rs).
-- - 'cancelled': `courier.cancel`, a compare-and-set from 'pending' or
--   'scheduled' under the action row's lock. A claim locks the row and
--   re-checks 'pending' too, so exactly one of the two wins; no worker needs
--   to hear of a cancel.
-- - 'expired': not sent before `expires_at`. Pending and scheduled actions
--   are expired by `courier.expire_due` (walking `expires_at` in
--   actions_ready and actions_scheduled); a claimed one by its worker, after
--   its last local check before a send or its lookups (courier_core::step).
-- Both new final states are final like 'done' and 'failed': they get an
-- actions_done row and the pruner takes them.
--
-- The invariant of migration 12 becomes two: a committed action is pending
-- if and only if it has a committed actions_ready row (now carrying its
-- expires_at), and scheduled if and only if it has an actions_scheduled
-- row (its not_before and expires_at). The same statement triggers keep
-- both; `PgStore::actions_ready_mismatch` checks both.
--
-- New columns carry no default, so adding them rewrites nothing. The new
-- CHECKs are added NOT VALID (no scan under this transaction's lock; every
-- new row is checked) and validated by version 24 outside any transaction.

ALTER TABLE actions
    ADD COLUMN not_before  timestamptz,
    ADD COLUMN expires_at  timestamptz,
    -- The provider's HTTP status when it refused the action (state
    -- 'failed'): a 400 created nothing, so only such an action may be
    -- re-driven (courier.redrive).
    ADD COLUMN fail_status smallint,
    -- A re-drive's links, both ways (no foreign keys: the pruner removes
    -- either end on its own time).
    ADD COLUMN redrive_of  bigint,
    ADD COLUMN redriven_as bigint,
    DROP CONSTRAINT actions_state_check,
    ADD CONSTRAINT actions_state_check CHECK (state = ANY (ARRAY[
        'scheduled', 'pending', 'claimed', 'dispatched', 'done', 'failed',
        'cancelled', 'expired'])) NOT VALID,
    ADD CONSTRAINT actions_expiry_check
        CHECK (expires_at IS NULL OR not_before IS NULL OR expires_at > not_before) NOT VALID,
    ADD CONSTRAINT actions_scheduled_check
        CHECK (state <> 'scheduled' OR not_before IS NOT NULL) NOT VALID;

ALTER TABLE actions_ready ADD COLUMN expires_at timestamptz;
-- expire_due's walk of the pending actions with a deadline.
CREATE INDEX actions_ready_expiry ON actions_ready (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE actions_scheduled (
    id          bigint PRIMARY KEY,
    store       text NOT NULL,
    not_before  timestamptz NOT NULL,
    expires_at  timestamptz
);
-- promote_due's walk: the earliest due first.
CREATE INDEX actions_scheduled_due ON actions_scheduled (not_before, id);
CREATE INDEX actions_scheduled_expiry ON actions_scheduled (expires_at)
    WHERE expires_at IS NOT NULL;

-- The side tables' triggers, as in versions 12, 13 and 18, with the new
-- states. The scheduled half of the update trigger runs only when the
-- statement moved a scheduled action (a cheap scan of a transition table
-- first): claims, settles and merges never do.
CREATE OR REPLACE FUNCTION courier_ready_insert() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto AS $$
BEGIN
    INSERT INTO actions_ready (id, store, expires_at)
    SELECT id, store, expires_at FROM added WHERE state = 'pending';
    INSERT INTO actions_scheduled (id, store, not_before, expires_at)
    SELECT id, store, not_before, expires_at FROM added WHERE state = 'scheduled';
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION courier_ready_update() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto AS $$
BEGIN
    -- Only rows whose state changed (`id` never changes; nothing changes
    -- not_before or expires_at).
    DELETE FROM actions_ready r
    USING old_rows o JOIN new_rows n ON n.id = o.id
    WHERE r.id = o.id AND o.state = 'pending' AND n.state <> 'pending';
    INSERT INTO actions_ready (id, store, expires_at)
    SELECT n.id, n.store, n.expires_at FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.state = 'pending' AND o.state <> 'pending';
    IF EXISTS (SELECT 1 FROM old_rows WHERE state = 'scheduled')
       OR EXISTS (SELECT 1 FROM new_rows WHERE state = 'scheduled') THEN
        DELETE FROM actions_scheduled s
        USING old_rows o JOIN new_rows n ON n.id = o.id
        WHERE s.id = o.id AND o.state = 'scheduled' AND n.state <> 'scheduled';
        INSERT INTO actions_scheduled (id, store, not_before, expires_at)
        SELECT n.id, n.store, n.not_before, n.expires_at
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.state = 'scheduled' AND o.state <> 'scheduled';
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION courier_ready_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto AS $$
BEGIN
    DELETE FROM actions_ready r
    USING old_rows o
    WHERE r.id = o.id AND o.state = 'pending';
    DELETE FROM actions_scheduled s
    USING old_rows o
    WHERE s.id = o.id AND o.state = 'scheduled';
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION courier_held_done_insert() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto AS $$
BEGIN
    INSERT INTO actions_held (id, store, owner, epoch, lease_until)
    SELECT id, store, owner, epoch, lease_until FROM added WHERE state = 'claimed';
    INSERT INTO actions_done (done_at, id)
    SELECT done_at, id FROM added
    WHERE state IN ('done', 'failed', 'cancelled', 'expired') AND done_at IS NOT NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION courier_held_done_update() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto AS $$
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
      AND o.state IN ('done', 'failed', 'cancelled', 'expired')
      AND (n.state NOT IN ('done', 'failed', 'cancelled', 'expired')
           OR n.done_at IS DISTINCT FROM o.done_at);
    INSERT INTO actions_done (done_at, id)
    SELECT n.done_at, n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.state IN ('done', 'failed', 'cancelled', 'expired') AND n.done_at IS NOT NULL
      AND (o.state NOT IN ('done', 'failed', 'cancelled', 'expired')
           OR o.done_at IS DISTINCT FROM n.done_at)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION courier_held_done_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = off SET plan_cache_mode = auto AS $$
BEGIN
    DELETE FROM actions_held h USING old_rows o
    WHERE h.id = o.id AND o.state = 'claimed';
    DELETE FROM actions_done d USING old_rows o
    WHERE d.done_at = o.done_at AND d.id = o.id
      AND o.state IN ('done', 'failed', 'cancelled', 'expired');
    RETURN NULL;
END $$;

-- The limits of a schedule, checked at enqueue against the time `at` (the
-- transaction's now()): the deadline must be ahead, after the not_before,
-- and neither may be more than 365 days ahead; a not_before may be in the
-- past (it is due at once) but not by more than a day, which is a caller's
-- bug (a zero time, seconds read as milliseconds), not a clock's skew.
-- IMMUTABLE and a single CASE, so that the planner inlines it, like
-- enqueue_problem.
CREATE FUNCTION courier.schedule_problem(not_before timestamptz, expires_at timestamptz,
                                         at timestamptz)
    RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN not_before < at - interval '1 day' THEN
            ARRAY['not_before', 'time_too_old', 'must not be more than a day in the past']
        WHEN not_before > at + interval '365 days' THEN
            ARRAY['not_before', 'time_too_far', 'must be at most 365 days ahead']
        WHEN expires_at <= at THEN
            ARRAY['expires_at', 'already_expired', 'must be in the future']
        WHEN expires_at > at + interval '365 days' THEN
            ARRAY['expires_at', 'time_too_far', 'must be at most 365 days ahead']
        WHEN expires_at <= not_before THEN
            ARRAY['expires_at', 'expires_before_not_before', 'must be later than not_before']
    END
$$;

-- The enqueue of version 21 with a schedule: two more arguments, both
-- optional. An action whose not_before is ahead is inserted 'scheduled';
-- any other 'pending'. A repeat of a key must repeat the schedule too.
DROP FUNCTION courier.enqueue(text, text, text, text);
DROP FUNCTION courier.enqueue_many(text[], text[], text[], text[]);

CREATE FUNCTION courier.enqueue(store text, recipient text, body text, key text DEFAULT NULL,
                                not_before timestamptz DEFAULT NULL,
                                expires_at timestamptz DEFAULT NULL)
    RETURNS TABLE (id bigint, created boolean)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    problem text[] := coalesce(
        courier.enqueue_problem(enqueue.store, enqueue.recipient, enqueue.body, enqueue.key),
        courier.schedule_problem(enqueue.not_before, enqueue.expires_at, now()));
    made bigint;
    old record;
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = problem[1] || ': ' || problem[3],
            COLUMN = problem[1], CONSTRAINT = problem[2];
    END IF;
    INSERT INTO stores (store) VALUES (enqueue.store) ON CONFLICT (store) DO NOTHING;
    INSERT INTO actions (uid, store, client_key, recipient, body, not_before, expires_at, state)
    VALUES (courier.uuid_v7(), enqueue.store, enqueue.key, enqueue.recipient, enqueue.body,
            enqueue.not_before, enqueue.expires_at,
            CASE WHEN enqueue.not_before > now() THEN 'scheduled' ELSE 'pending' END)
    ON CONFLICT (store, client_key) WHERE client_key IS NOT NULL DO NOTHING
    RETURNING actions.id INTO made;
    IF made IS NOT NULL THEN
        RETURN QUERY SELECT made, true;
        RETURN;
    END IF;
    -- A conflict: only an action with this (store, key) causes one.
    SELECT a.id, a.recipient, a.body, a.not_before, a.expires_at INTO old FROM actions a
    WHERE a.store = enqueue.store AND a.client_key = enqueue.key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = 'an action with this (store, key) was enqueued concurrently '
                      'and is not visible to this transaction: retry';
    END IF;
    IF (old.recipient, old.body, old.not_before, old.expires_at) IS DISTINCT FROM
       (enqueue.recipient, enqueue.body, enqueue.not_before, enqueue.expires_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'QC001',
            MESSAGE = format('key: already used for action %s with a different request', old.id),
            COLUMN = 'key', CONSTRAINT = 'key_reused', DETAIL = format('existing=%s', old.id);
    END IF;
    RETURN QUERY SELECT old.id, false;
END $$;

CREATE FUNCTION courier.enqueue_many(stores text[], recipients text[], bodies text[],
                                     keys text[] DEFAULT NULL,
                                     not_befores timestamptz[] DEFAULT NULL,
                                     expires_ats timestamptz[] DEFAULT NULL)
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
       OR (keys IS NOT NULL AND cardinality(keys) <> n)
       OR (not_befores IS NOT NULL AND cardinality(not_befores) <> n)
       OR (expires_ats IS NOT NULL AND cardinality(expires_ats) <> n) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'items: stores, recipients, bodies, keys, not_befores and expires_ats '
                      'must have the same length',
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
    FROM unnest(stores, recipients, bodies, keys, not_befores, expires_ats)
             WITH ORDINALITY AS t(s, r, b, k, nb, ea, i),
         LATERAL (SELECT coalesce(courier.enqueue_problem(t.s, t.r, t.b, t.k),
                                  courier.schedule_problem(t.nb, t.ea, now())) AS p) p
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
        SELECT t.i, t.r, t.b, t.nb, t.ea,
               first_value(t.i) OVER w AS i0, first_value(t.r) OVER w AS r0,
               first_value(t.b) OVER w AS b0, first_value(t.nb) OVER w AS nb0,
               first_value(t.ea) OVER w AS ea0
        FROM unnest(stores, recipients, bodies, keys, not_befores, expires_ats)
                 WITH ORDINALITY AS t(s, r, b, k, nb, ea, i)
        WHERE t.k IS NOT NULL
        WINDOW w AS (PARTITION BY t.s, t.k ORDER BY t.i)) x
    WHERE (x.r, x.b, x.nb, x.ea) IS DISTINCT FROM (x.r0, x.b0, x.nb0, x.ea0)
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
        SELECT f.i, f.s, f.r, f.b, f.k, f.nb, f.ea, courier.uuid_v7() AS uid FROM (
            SELECT t.*, row_number() OVER (PARTITION BY t.s, t.k ORDER BY t.i) AS nth
            FROM unnest(stores, recipients, bodies, keys, not_befores, expires_ats)
                     WITH ORDINALITY AS t(s, r, b, k, nb, ea, i)) f
        WHERE f.k IS NULL OR f.nth = 1
    ), made AS (
        INSERT INTO actions (uid, store, client_key, recipient, body, not_before, expires_at, state)
        SELECT f.uid, f.s, f.k, f.r, f.b, f.nb, f.ea,
               CASE WHEN f.nb > now() THEN 'scheduled' ELSE 'pending' END
        FROM firsts f ORDER BY f.i
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
        SELECT t.i, t.s, t.k, t.r, t.b, t.nb, t.ea,
               first_value(t.i) OVER (PARTITION BY t.s, t.k ORDER BY t.i) AS i0
        FROM unnest(stores, recipients, bodies, keys, not_befores, expires_ats)
                 WITH ORDINALITY AS t(s, r, b, k, nb, ea, i)
        WHERE t.k IS NOT NULL) x
    LEFT JOIN unnest(made_items) AS m(i) ON m.i = x.i0
    LEFT JOIN actions a ON a.store = x.s AND a.client_key = x.k
    WHERE m.i IS NULL
      AND (a.id IS NULL OR (a.recipient, a.body, a.not_before, a.expires_at)
                           IS DISTINCT FROM (x.r, x.b, x.nb, x.ea))
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

-- Moves at most max_n due scheduled actions to 'pending', the earliest due
-- first, and gives their stores a store_work row, with the handshake of
-- courier_store_work_add (a shared advisory lock per store, in store order,
-- against courier_store_work_sweep). Rows another transaction holds are
-- skipped, so concurrent callers share the work and wait for nobody.
-- `at` is the time (NULL: now()). Answers how many it promoted.
CREATE FUNCTION courier.promote_due(max_n integer DEFAULT 1000, at timestamptz DEFAULT NULL)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT
    SET enable_seqscan = off AS $$
DECLARE
    moved_stores text[];
    moved integer;
BEGIN
    WITH due AS (
        SELECT a.id FROM (
            SELECT s.id FROM actions_scheduled s
            WHERE s.not_before <= coalesce(at, now())
            ORDER BY s.not_before, s.id
            LIMIT max_n) s
        CROSS JOIN LATERAL (
            SELECT a.id FROM actions a
            WHERE a.id = s.id AND a.state = 'scheduled'
            FOR UPDATE SKIP LOCKED) a
    ), promoted AS (
        UPDATE actions a SET state = 'pending'
        WHERE a.id = ANY (ARRAY(SELECT id FROM due))
        RETURNING a.store
    )
    SELECT array_agg(DISTINCT store), count(*) INTO moved_stores, moved FROM promoted;
    IF moved = 0 THEN
        RETURN 0;
    END IF;
    -- 7 is STORE_WORK_LOCK (see courier_store_work_add).
    PERFORM pg_advisory_xact_lock_shared(7, hashtext(x.store))
    FROM (SELECT s AS store FROM unnest(moved_stores) AS s ORDER BY s) x;
    INSERT INTO store_work (store, last_served_at)
    SELECT s.store, s.last_served_at FROM stores s
    WHERE s.store = ANY (moved_stores)
    ORDER BY s.store
    ON CONFLICT (store) DO NOTHING;
    RETURN moved;
END $$;

-- Ends at most max_n pending or scheduled actions whose expires_at has
-- passed as 'expired' (no request was ever sent for them: only a claim
-- counts an attempt), the earliest deadline first. Claimed actions are
-- their workers' to end. Rows another transaction holds are skipped.
-- `at` is the time (NULL: now()). Answers how many it expired.
CREATE FUNCTION courier.expire_due(max_n integer DEFAULT 1000, at timestamptz DEFAULT NULL)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT
    SET enable_seqscan = off AS $$
DECLARE
    n integer;
BEGIN
    WITH due AS (
        SELECT a.id FROM (
            (SELECT r.id FROM actions_ready r
             WHERE r.expires_at <= coalesce(at, now())
             ORDER BY r.expires_at LIMIT max_n)
            UNION ALL
            (SELECT s.id FROM actions_scheduled s
             WHERE s.expires_at <= coalesce(at, now())
             ORDER BY s.expires_at LIMIT max_n)) x
        CROSS JOIN LATERAL (
            SELECT a.id FROM actions a
            WHERE a.id = x.id AND a.state IN ('pending', 'scheduled')
            FOR UPDATE SKIP LOCKED) a
        LIMIT max_n
    ), expired AS (
        UPDATE actions a
        SET state = 'expired', done_at = coalesce(at, now()),
            fail_reason = 'expired: not sent before expires_at'
        WHERE a.id = ANY (ARRAY(SELECT id FROM due))
        RETURNING 1
    )
    SELECT count(*) INTO n FROM expired;
    RETURN n;
END $$;

-- Cancels one action that no worker holds: a compare-and-set from
-- 'pending' or 'scheduled' to 'cancelled' under the row's lock (waiting for
-- a claim that holds it, then reading the state that claim committed).
-- `stores` limits the actions the caller may touch (NULL: any, an admin's
-- token); `by_name` is the token's name, recorded in an `events` row
-- ('cancel'). Answers one row: outcome 'cancelled', 'not_found' (no such
-- action, or one of a store the caller may not touch: the same answer, so
-- that other stores' ids reveal nothing) or 'refused' (the state it is in:
-- claimed, dispatched or final), and the action's state after the call.
CREATE FUNCTION courier.cancel(action_id bigint, by_name text, stores text[] DEFAULT NULL)
    RETURNS TABLE (outcome text, state text)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    found_state text;
BEGIN
    SELECT a.state INTO found_state FROM actions a
    WHERE a.id = cancel.action_id
      AND (cancel.stores IS NULL OR a.store = ANY (cancel.stores))
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text;
        RETURN;
    END IF;
    IF found_state NOT IN ('pending', 'scheduled') THEN
        RETURN QUERY SELECT 'refused'::text, found_state;
        RETURN;
    END IF;
    UPDATE actions a SET state = 'cancelled', done_at = now(),
        fail_reason = 'cancelled by ' || cancel.by_name
    WHERE a.id = cancel.action_id;
    INSERT INTO events (kind, action_id, detail)
    VALUES ('cancel', cancel.action_id, format('by=%s from=%s', cancel.by_name, found_state));
    RETURN QUERY SELECT 'cancelled'::text, 'cancelled'::text;
END $$;

-- Re-drives one action the provider refused with a 400 (under the provider
-- contract such a send created nothing): a new action, with a new uid and
-- so a new provider key, the same store, recipient and body and no schedule,
-- linked both ways (redrive_of, redriven_as), and an `events` row
-- ('redrive') on the old action. courier decides from the answer it
-- recorded (fail_status); any other ending may have had an effect, or its
-- key already has a message (a 422 idempotency_key_reused), and is refused.
-- A second re-drive of the same action answers the first one's new action.
-- Answers one row: outcome 'redriven', 'already' (new_id is the earlier
-- re-drive), 'not_found' (as for cancel) or 'refused' (with the state and
-- the reason), and the new action's id.
CREATE FUNCTION courier.redrive(action_id bigint, by_name text, stores text[] DEFAULT NULL)
    RETURNS TABLE (outcome text, new_id bigint, state text, reason text)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    old record;
    made bigint;
BEGIN
    SELECT a.id, a.store, a.recipient, a.body, a.state, a.fail_status, a.redriven_as
    INTO old FROM actions a
    WHERE a.id = redrive.action_id
      AND (redrive.stores IS NULL OR a.store = ANY (redrive.stores))
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::bigint, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF old.redriven_as IS NOT NULL THEN
        RETURN QUERY SELECT 'already'::text, old.redriven_as, old.state, NULL::text;
        RETURN;
    END IF;
    IF old.state <> 'failed' THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, old.state,
            CASE WHEN old.state IN ('cancelled', 'expired')
                 THEN 'it was never sent: enqueue it again'
                 ELSE 'only an action the provider refused can be re-driven' END;
        RETURN;
    END IF;
    IF old.fail_status IS DISTINCT FROM 400 THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, old.state,
            CASE WHEN old.fail_status = 422
                 THEN 'the provider answered 422: its key already has a message'
                 ELSE 'the provider did not answer 400: the send may have had an effect' END;
        RETURN;
    END IF;
    INSERT INTO actions (uid, store, recipient, body, redrive_of)
    VALUES (courier.uuid_v7(), old.store, old.recipient, old.body, old.id)
    RETURNING actions.id INTO made;
    UPDATE actions a SET redriven_as = made WHERE a.id = old.id;
    INSERT INTO events (kind, action_id, detail)
    VALUES ('redrive', old.id, format('by=%s as=%s', redrive.by_name, made));
    RETURN QUERY SELECT 'redriven'::text, made, 'pending'::text, NULL::text;
END $$;
