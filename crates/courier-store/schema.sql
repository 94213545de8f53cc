-- The courier schema after every migration (crates/courier-store/migrations),
-- written from the catalogs by crates/courier-store/tests/schema_file.rs, which
-- checks it. Do not edit: regenerate with
--   COURIER_SCHEMA_WRITE=1 cargo nextest run -p courier-store --test schema_file
-- Each kind of object in name order: tables (columns, constraints, storage
-- settings), sequences, indexes, views, functions, triggers, comments.

-- Tables
CREATE TABLE actions (
    id bigint NOT NULL DEFAULT nextval('actions_id_seq'::regclass),
    uid uuid NOT NULL,
    store text NOT NULL,
    client_key text,
    recipient text NOT NULL,
    body text NOT NULL,
    state text NOT NULL DEFAULT 'pending'::text,
    owner text,
    epoch bigint NOT NULL DEFAULT 0,
    lease_until timestamp with time zone,
    enqueued_at timestamp with time zone NOT NULL DEFAULT now(),
    claimed_at timestamp with time zone,
    dispatched_at timestamp with time zone,
    done_at timestamp with time zone,
    fail_reason text,
    not_before timestamp with time zone,
    expires_at timestamp with time zone,
    fail_status smallint,
    redrive_of bigint,
    redriven_as bigint,
    resolved_as text,
    CONSTRAINT actions_body_check CHECK (((length(body) >= 1) AND (length(body) <= 1600))),
    CONSTRAINT actions_check CHECK (((state <> 'claimed'::text) OR ((owner IS NOT NULL) AND (lease_until IS NOT NULL) AND (epoch > 0)))),
    CONSTRAINT actions_check1 CHECK (((state = 'claimed'::text) OR (lease_until IS NULL))),
    CONSTRAINT actions_client_key_check CHECK (((client_key IS NULL) OR ((length(client_key) >= 1) AND (length(client_key) <= 255)))),
    CONSTRAINT actions_epoch_check CHECK ((epoch >= 0)),
    CONSTRAINT actions_expiry_check CHECK (((expires_at IS NULL) OR (not_before IS NULL) OR (expires_at > not_before))),
    CONSTRAINT actions_pkey PRIMARY KEY (id),
    CONSTRAINT actions_resolved_as_check CHECK (((resolved_as IS NULL) OR (resolved_as = ANY (ARRAY['sent'::text, 'not_sent'::text])))),
    CONSTRAINT actions_scheduled_check CHECK (((state <> 'scheduled'::text) OR (not_before IS NOT NULL))),
    CONSTRAINT actions_state_check CHECK ((state = ANY (ARRAY['scheduled'::text, 'pending'::text, 'claimed'::text, 'dispatched'::text, 'done'::text, 'failed'::text, 'cancelled'::text, 'expired'::text, 'unknown'::text]))),
    CONSTRAINT actions_uid_key UNIQUE (uid)
) WITH (fillfactor=80);

CREATE TABLE actions_done (
    done_at timestamp with time zone NOT NULL,
    id bigint NOT NULL,
    CONSTRAINT actions_done_pkey PRIMARY KEY (done_at, id)
);

CREATE TABLE actions_held (
    id bigint NOT NULL,
    store text NOT NULL,
    owner text NOT NULL,
    epoch bigint NOT NULL,
    lease_until timestamp with time zone NOT NULL,
    CONSTRAINT actions_held_pkey PRIMARY KEY (id)
);

CREATE TABLE actions_ready (
    id bigint NOT NULL,
    store text NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT actions_ready_pkey PRIMARY KEY (id)
);

CREATE TABLE actions_scheduled (
    id bigint NOT NULL,
    store text NOT NULL,
    not_before timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT actions_scheduled_pkey PRIMARY KEY (id)
);

CREATE TABLE api_tokens (
    id bigint NOT NULL DEFAULT nextval('api_tokens_id_seq'::regclass),
    name text NOT NULL,
    admin boolean NOT NULL DEFAULT false,
    stores text[] NOT NULL DEFAULT '{}'::text[],
    secret_sha256 bytea NOT NULL,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    revoked_at timestamp with time zone,
    CONSTRAINT api_tokens_check CHECK ((admin = (cardinality(stores) = 0))),
    CONSTRAINT api_tokens_name_check CHECK (((length(name) >= 1) AND (length(name) <= 64))),
    CONSTRAINT api_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT api_tokens_secret_sha256_check CHECK ((length(secret_sha256) = 32)),
    CONSTRAINT api_tokens_stores_check CHECK ((cardinality(stores) <= 1000))
);

CREATE TABLE api_tokens_version (
    one boolean NOT NULL DEFAULT true,
    version bigint NOT NULL,
    CONSTRAINT api_tokens_version_one_check CHECK (one),
    CONSTRAINT api_tokens_version_pkey PRIMARY KEY (one)
);

CREATE TABLE count_deltas (
    name text NOT NULL,
    n bigint NOT NULL
);

CREATE TABLE counts (
    name text NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT counts_pkey PRIMARY KEY (name)
);

CREATE TABLE events (
    id bigint NOT NULL DEFAULT nextval('events_id_seq'::regclass),
    at timestamp with time zone NOT NULL DEFAULT now(),
    kind text NOT NULL,
    action_id bigint,
    detail text NOT NULL DEFAULT ''::text,
    CONSTRAINT events_pkey PRIMARY KEY (id)
);

CREATE TABLE intents_watched (
    action_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    open boolean NOT NULL,
    next_check_at timestamp with time zone,
    CONSTRAINT intents_watched_check CHECK ((open OR (next_check_at IS NOT NULL))),
    CONSTRAINT intents_watched_pkey PRIMARY KEY (action_id)
);

CREATE TABLE outbox (
    action_id bigint NOT NULL,
    idem_key text NOT NULL,
    epoch_written bigint NOT NULL,
    status text NOT NULL DEFAULT 'sending'::text,
    attempts integer NOT NULL DEFAULT 0,
    lookups integer NOT NULL DEFAULT 0,
    message_id text,
    conflict boolean NOT NULL DEFAULT false,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    accepted_at timestamp with time zone,
    final_at timestamp with time zone,
    next_check_at timestamp with time zone,
    CONSTRAINT outbox_action_id_fkey FOREIGN KEY (action_id) REFERENCES actions(id),
    CONSTRAINT outbox_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT outbox_check CHECK (((status = ANY (ARRAY['delivered'::text, 'failed'::text])) = (final_at IS NOT NULL))),
    CONSTRAINT outbox_epoch_written_check CHECK ((epoch_written > 0)),
    CONSTRAINT outbox_idem_key_check CHECK (((length(idem_key) >= 1) AND (length(idem_key) <= 255))),
    CONSTRAINT outbox_idem_key_key UNIQUE (idem_key),
    CONSTRAINT outbox_lookups_check CHECK ((lookups >= 0)),
    CONSTRAINT outbox_pkey PRIMARY KEY (action_id),
    CONSTRAINT outbox_status_check CHECK ((status = ANY (ARRAY['sending'::text, 'accepted'::text, 'sent'::text, 'delivered'::text, 'failed'::text])))
) WITH (fillfactor=80);

CREATE TABLE outbox_accepts (
    accepted_at timestamp with time zone NOT NULL,
    action_id bigint NOT NULL,
    CONSTRAINT outbox_accepts_pkey PRIMARY KEY (accepted_at, action_id)
);

CREATE TABLE provider_gates (
    provider text NOT NULL,
    rate_per_s double precision,
    burst integer,
    tokens double precision,
    tokens_at timestamp with time zone,
    paused_until timestamp with time zone,
    pauses bigint NOT NULL DEFAULT 0,
    configured_at timestamp with time zone,
    CONSTRAINT provider_gates_check CHECK ((((rate_per_s IS NULL) AND (burst IS NULL)) OR (((rate_per_s >= (0.001)::double precision) AND (rate_per_s <= (100000)::double precision)) AND ((burst >= 1) AND (burst <= 100000))))),
    CONSTRAINT provider_gates_pkey PRIMARY KEY (provider),
    CONSTRAINT provider_gates_provider_check CHECK (((length(provider) >= 1) AND (length(provider) <= 64)))
);

CREATE TABLE schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE store_releases (
    id bigint NOT NULL DEFAULT nextval('store_releases_id_seq'::regclass),
    store text NOT NULL,
    n integer NOT NULL,
    CONSTRAINT store_releases_n_check CHECK ((n > 0)),
    CONSTRAINT store_releases_pkey PRIMARY KEY (id)
);

CREATE TABLE store_work (
    store text NOT NULL,
    last_served_at timestamp with time zone,
    CONSTRAINT store_work_pkey PRIMARY KEY (store)
);

CREATE TABLE stores (
    store text NOT NULL,
    in_flight integer NOT NULL DEFAULT 0,
    last_served_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    rate_per_s double precision,
    burst integer,
    in_flight_max integer,
    tokens double precision,
    tokens_at timestamp with time zone,
    configured_at timestamp with time zone,
    CONSTRAINT stores_in_flight_check CHECK ((in_flight >= 0)),
    CONSTRAINT stores_in_flight_max_check CHECK (((in_flight_max IS NULL) OR ((in_flight_max >= 1) AND (in_flight_max <= 10000)))),
    CONSTRAINT stores_pkey PRIMARY KEY (store),
    CONSTRAINT stores_rate_check CHECK ((((rate_per_s IS NULL) AND (burst IS NULL)) OR (((rate_per_s >= (0.001)::double precision) AND (rate_per_s <= (100000)::double precision)) AND ((burst >= 1) AND (burst <= 100000))))),
    CONSTRAINT stores_store_check CHECK (((length(store) >= 1) AND (length(store) <= 64)))
);

CREATE TABLE webhook_events (
    event_id text NOT NULL,
    idem_key text NOT NULL,
    status text NOT NULL,
    outcome text NOT NULL,
    received_at timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT webhook_events_pkey PRIMARY KEY (event_id)
);

-- Sequences
CREATE SEQUENCE actions_id_seq AS bigint START 1 INCREMENT 1 OWNED BY actions.id;
CREATE SEQUENCE api_tokens_id_seq AS bigint START 1 INCREMENT 1 OWNED BY api_tokens.id;
CREATE SEQUENCE events_id_seq AS bigint START 1 INCREMENT 1 OWNED BY events.id;
CREATE SEQUENCE store_releases_id_seq AS bigint START 1 INCREMENT 1 OWNED BY store_releases.id;

-- Indexes (those of constraints are with their tables)
CREATE UNIQUE INDEX actions_store_client_key ON public.actions USING btree (store, client_key) WHERE (client_key IS NOT NULL);
CREATE INDEX actions_held_lease ON public.actions_held USING btree (lease_until);
CREATE INDEX actions_ready_expiry ON public.actions_ready USING btree (expires_at) WHERE (expires_at IS NOT NULL);
CREATE INDEX actions_ready_store ON public.actions_ready USING btree (store, id);
CREATE INDEX actions_scheduled_due ON public.actions_scheduled USING btree (not_before, id);
CREATE INDEX actions_scheduled_expiry ON public.actions_scheduled USING btree (expires_at) WHERE (expires_at IS NOT NULL);
CREATE INDEX events_kind_id ON public.events USING btree (kind, id);
CREATE INDEX intents_watched_next_check ON public.intents_watched USING btree (next_check_at) WHERE (next_check_at IS NOT NULL);
CREATE INDEX intents_watched_open ON public.intents_watched USING btree (created_at, action_id) WHERE open;
CREATE INDEX store_releases_store ON public.store_releases USING btree (store);
CREATE INDEX store_work_order ON public.store_work USING btree (last_served_at NULLS FIRST, store);
CREATE INDEX webhook_events_received ON public.webhook_events USING btree (received_at);

-- Views
CREATE VIEW counts_now AS
 SELECT c.name,
    sum(c.n)::bigint AS n
   FROM ( SELECT counts.name,
            counts.n
           FROM counts
        UNION ALL
         SELECT count_deltas.name,
            count_deltas.n
           FROM count_deltas) c
  GROUP BY c.name;

CREATE VIEW store_in_flight AS
 SELECT s.store,
    s.in_flight - COALESCE(r.n, 0::bigint)::integer AS in_flight
   FROM stores s
     LEFT JOIN ( SELECT store_releases.store,
            sum(store_releases.n) AS n
           FROM store_releases
          GROUP BY store_releases.store) r ON r.store = s.store;

-- Schemas
CREATE SCHEMA courier;

-- Functions
CREATE OR REPLACE FUNCTION public.courier_accepts_update()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    INSERT INTO outbox_accepts (accepted_at, action_id)
    SELECT n.accepted_at, n.action_id
    FROM new_rows n JOIN old_rows o ON o.action_id = n.action_id
    WHERE o.accepted_at IS NULL AND n.accepted_at IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_api_tokens_bump()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    UPDATE api_tokens_version SET version = version + 1;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_count_actions()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION public.courier_count_events()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (name, n)
        SELECT 'events.' || kind, count(*) FROM new_rows GROUP BY kind;
    ELSE
        INSERT INTO count_deltas (name, n)
        SELECT 'events.' || kind, -count(*) FROM old_rows GROUP BY kind;
    END IF;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_count_outbox()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION public.courier_count_stores()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (name, n) SELECT 'stores', count(*) FROM new_rows HAVING count(*) > 0;
    ELSE
        INSERT INTO count_deltas (name, n) SELECT 'stores', -count(*) FROM old_rows HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_held_done_delete()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    DELETE FROM actions_held h USING old_rows o
    WHERE h.id = o.id AND o.state = 'claimed';
    DELETE FROM actions_done d USING old_rows o
    WHERE d.done_at = o.done_at AND d.id = o.id
      AND o.state IN ('done', 'failed', 'cancelled', 'expired');
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_held_done_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    INSERT INTO actions_held (id, store, owner, epoch, lease_until)
    SELECT id, store, owner, epoch, lease_until FROM added WHERE state = 'claimed';
    INSERT INTO actions_done (done_at, id)
    SELECT done_at, id FROM added
    WHERE state IN ('done', 'failed', 'cancelled', 'expired') AND done_at IS NOT NULL;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_held_done_update()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'auto'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION public.courier_open_intents_past(age_s double precision, counted_max bigint)
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET enable_bitmapscan TO 'off'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
        SELECT count(*) FROM (
            SELECT 1 FROM intents_watched
            WHERE open AND created_at < now() - age_s * interval '1 second'
            ORDER BY created_at
            LIMIT counted_max) o
    $function$;

CREATE OR REPLACE FUNCTION public.courier_ready_delete()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    DELETE FROM actions_ready r
    USING old_rows o
    WHERE r.id = o.id AND o.state = 'pending';
    DELETE FROM actions_scheduled s
    USING old_rows o
    WHERE s.id = o.id AND o.state = 'scheduled';
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_ready_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    INSERT INTO actions_ready (id, store, expires_at)
    SELECT id, store, expires_at FROM added WHERE state = 'pending';
    INSERT INTO actions_scheduled (id, store, not_before, expires_at)
    SELECT id, store, not_before, expires_at FROM added WHERE state = 'scheduled';
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_ready_update()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'auto'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION public.courier_releases_delete(ids bigint[])
 RETURNS TABLE(store text, n integer)
 LANGUAGE sql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
    DELETE FROM store_releases r WHERE r.id = ANY (ids) RETURNING r.store, r.n
$function$;

CREATE OR REPLACE FUNCTION public.courier_releases_of(stores text[])
 RETURNS bigint[]
 LANGUAGE sql
 STABLE
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
    SELECT coalesce(array_agg(r.id), ARRAY[]::bigint[])
    FROM store_releases r WHERE r.store = ANY (stores)
$function$;

CREATE OR REPLACE FUNCTION public.courier_releases_unfolded(one_store text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
    SELECT coalesce(sum(r.n), 0) FROM store_releases r WHERE r.store = one_store
$function$;

CREATE OR REPLACE FUNCTION public.courier_status_is_final(status text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT status IN ('delivered', 'failed') $function$;

CREATE OR REPLACE FUNCTION public.courier_store_work_add()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
DECLARE
    missing text;
BEGIN
    -- The foreign key's check: every store named exists.
    SELECT a.store INTO missing FROM added a
    WHERE NOT EXISTS (SELECT 1 FROM stores s WHERE s.store = a.store)
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'store % is not registered', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- 7 is STORE_WORK_LOCK: the advisory lock space of the store_work
    -- handshake (courier's other advisory locks take one bigint key, a
    -- space apart from two int keys). Store order: shared locks never wait
    -- for each other, only for a sweep, which never waits.
    PERFORM pg_advisory_xact_lock_shared(7, hashtext(x.store))
    FROM (SELECT DISTINCT store FROM added WHERE state = 'pending' ORDER BY store) x;
    INSERT INTO store_work (store, last_served_at)
    SELECT s.store, s.last_served_at FROM stores s
    WHERE s.store IN (SELECT store FROM added WHERE state = 'pending')
    ORDER BY s.store
    ON CONFLICT (store) DO NOTHING;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_store_work_sweep(candidates text[])
 RETURNS text[]
 LANGUAGE plpgsql
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION public.courier_tokens(rate double precision, burst integer, tokens double precision, tokens_at timestamp with time zone, at_time timestamp with time zone)
 RETURNS double precision
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE WHEN rate IS NULL THEN NULL
                ELSE LEAST(burst::double precision,
                           coalesce(tokens, burst::double precision)
                           + rate * GREATEST(0, extract(epoch FROM (at_time - coalesce(tokens_at, at_time)))))
           END
$function$;

CREATE OR REPLACE FUNCTION public.courier_watched_delete()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    DELETE FROM intents_watched w USING old_rows o WHERE w.action_id = o.action_id;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_watched_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET enable_seqscan TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    INSERT INTO intents_watched (action_id, created_at, open, next_check_at)
    SELECT action_id, created_at, NOT courier_status_is_final(status), next_check_at
    FROM added
    WHERE NOT courier_status_is_final(status) OR next_check_at IS NOT NULL;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.courier_watched_update()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'on'
 SET enable_mergejoin TO 'on'
 SET plan_cache_mode TO 'auto'
AS $function$
BEGIN
    -- Gone once final with no check due.
    DELETE FROM intents_watched w
    USING old_rows o JOIN new_rows n ON n.action_id = o.action_id
    WHERE w.action_id = o.action_id
      AND (NOT courier_status_is_final(o.status) OR o.next_check_at IS NOT NULL)
      AND courier_status_is_final(n.status) AND n.next_check_at IS NULL;
    -- Written when it becomes watched or what is watched changes.
    INSERT INTO intents_watched AS w (action_id, created_at, open, next_check_at)
    SELECT n.action_id, n.created_at, NOT courier_status_is_final(n.status), n.next_check_at
    FROM new_rows n JOIN old_rows o ON o.action_id = n.action_id
    WHERE (NOT courier_status_is_final(n.status) OR n.next_check_at IS NOT NULL)
      AND (NOT (NOT courier_status_is_final(o.status) OR o.next_check_at IS NOT NULL)
           OR (o.created_at, courier_status_is_final(o.status), o.next_check_at)
              IS DISTINCT FROM (n.created_at, courier_status_is_final(n.status), n.next_check_at))
    ON CONFLICT (action_id) DO UPDATE
        SET created_at = excluded.created_at, open = excluded.open,
            next_check_at = excluded.next_check_at;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION courier.cancel(action_id bigint, by_name text, stores text[] DEFAULT NULL::text[])
 RETURNS TABLE(outcome text, state text)
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION courier.enqueue(store text, recipient text, body text, key text DEFAULT NULL::text, not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(id bigint, created boolean)
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION courier.enqueue_many(stores text[], recipients text[], bodies text[], keys text[] DEFAULT NULL::text[], not_befores timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], expires_ats timestamp with time zone[] DEFAULT NULL::timestamp with time zone[])
 RETURNS TABLE(item integer, id bigint, created boolean)
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION courier.enqueue_problem(store text, recipient text, body text, key text)
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION courier.expire_due(max_n integer DEFAULT 1000, at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
 SET enable_seqscan TO 'off'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION courier.promote_due(max_n integer DEFAULT 1000, at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
 SET enable_seqscan TO 'off'
AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION courier.provider_configure(provider text, rate_per_s double precision, burst integer, by_name text)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
#variable_conflict use_column
DECLARE
    old record;
BEGIN
    INSERT INTO provider_gates (provider) VALUES (provider_configure.provider)
    ON CONFLICT (provider) DO NOTHING;
    SELECT g.rate_per_s, g.burst INTO old
    FROM provider_gates g WHERE g.provider = provider_configure.provider FOR UPDATE;
    UPDATE provider_gates g
    SET rate_per_s = provider_configure.rate_per_s,
        burst = provider_configure.burst,
        tokens = CASE WHEN g.rate_per_s IS NOT DISTINCT FROM provider_configure.rate_per_s
                       AND g.burst IS NOT DISTINCT FROM provider_configure.burst
                      THEN g.tokens END,
        tokens_at = CASE WHEN g.rate_per_s IS NOT DISTINCT FROM provider_configure.rate_per_s
                          AND g.burst IS NOT DISTINCT FROM provider_configure.burst
                         THEN g.tokens_at END,
        configured_at = now()
    WHERE g.provider = provider_configure.provider;
    INSERT INTO events (kind, detail)
    VALUES ('provider_settings',
            format('provider=%s by=%s rate_per_s=%s->%s burst=%s->%s',
                   provider_configure.provider, by_name,
                   coalesce(old.rate_per_s::text, 'none'),
                   coalesce(provider_configure.rate_per_s::text, 'none'),
                   coalesce(old.burst::text, 'none'), coalesce(provider_configure.burst::text, 'none')));
    RETURN now();
END $function$;

CREATE OR REPLACE FUNCTION courier.provider_pause(provider text, pause_ms bigint, at_time timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
#variable_conflict use_column
DECLARE
    was timestamptz;
    pause_end timestamptz;
BEGIN
    INSERT INTO provider_gates (provider) VALUES (provider_pause.provider)
    ON CONFLICT (provider) DO NOTHING;
    SELECT g.paused_until INTO was FROM provider_gates g
    WHERE g.provider = provider_pause.provider FOR UPDATE;
    pause_end := GREATEST(coalesce(was, '-infinity'),
                      coalesce(at_time, clock_timestamp()) + LEAST(GREATEST(pause_ms, 1), 300000) * interval '1 millisecond');
    UPDATE provider_gates g SET paused_until = pause_end, pauses = g.pauses + 1
    WHERE g.provider = provider_pause.provider;
    IF was IS NULL OR was < coalesce(at_time, clock_timestamp()) THEN
        INSERT INTO events (kind, detail)
        VALUES ('provider_paused', format('provider=%s ms=%s', provider_pause.provider, pause_ms));
    END IF;
    RETURN (extract(epoch FROM pause_end - coalesce(at_time, clock_timestamp())) * 1000)::bigint;
END $function$;

CREATE OR REPLACE FUNCTION courier.redrive(action_id bigint, by_name text, stores text[] DEFAULT NULL::text[])
 RETURNS TABLE(outcome text, new_id bigint, state text, reason text)
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
#variable_conflict use_column
DECLARE
    old record;
    made bigint;
    reported text;
BEGIN
    SELECT a.id, a.store, a.recipient, a.body, a.state, a.fail_status, a.resolved_as,
           a.redriven_as
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
                 WHEN old.state = 'unknown'
                 THEN 'its outcome is unknown: resolve it as not sent first'
                 ELSE 'only an action the provider refused, or one resolved as not sent, can be re-driven' END;
        RETURN;
    END IF;
    IF old.fail_status IS DISTINCT FROM 400 AND old.resolved_as IS DISTINCT FROM 'not_sent' THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, old.state,
            CASE WHEN old.fail_status = 422
                 THEN 'the provider answered 422: its key already has a message'
                 ELSE 'the provider did not answer 400: the send may have had an effect' END;
        RETURN;
    END IF;
    -- Evidence beats a resolution: a webhook that carried the key after an
    -- operator said "not sent" (the merge leaves a failed action as it is)
    -- shows the message went out.
    SELECT o.status INTO reported FROM outbox o WHERE o.action_id = old.id;
    IF reported IS NOT NULL AND reported <> 'sending' THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, old.state,
            format('the provider reported its message (%s): it went out', reported);
        RETURN;
    END IF;
    INSERT INTO actions (uid, store, recipient, body, redrive_of)
    VALUES (courier.uuid_v7(), old.store, old.recipient, old.body, old.id)
    RETURNING actions.id INTO made;
    UPDATE actions a SET redriven_as = made WHERE a.id = old.id;
    INSERT INTO events (kind, action_id, detail)
    VALUES ('redrive', old.id, format('by=%s as=%s', redrive.by_name, made));
    RETURN QUERY SELECT 'redriven'::text, made, 'pending'::text, NULL::text;
END $function$;

CREATE OR REPLACE FUNCTION courier.resolve(action_id bigint, resolution text, by_name text, stores text[] DEFAULT NULL::text[])
 RETURNS TABLE(outcome text, state text)
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
#variable_conflict use_column
DECLARE
    found_state text;
    now_state text;
BEGIN
    IF resolve.resolution IS NULL OR resolve.resolution NOT IN ('sent', 'not_sent') THEN
        RETURN QUERY SELECT 'invalid'::text, NULL::text;
        RETURN;
    END IF;
    SELECT a.state INTO found_state FROM actions a
    WHERE a.id = resolve.action_id
      AND (resolve.stores IS NULL OR a.store = ANY (resolve.stores))
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text;
        RETURN;
    END IF;
    IF found_state <> 'unknown' THEN
        RETURN QUERY SELECT 'refused'::text, found_state;
        RETURN;
    END IF;
    now_state := CASE resolve.resolution WHEN 'sent' THEN 'done' ELSE 'failed' END;
    UPDATE actions a SET state = now_state, done_at = now(), resolved_as = resolve.resolution,
        fail_reason = CASE WHEN now_state = 'failed'
                           THEN 'not sent: resolved by ' || resolve.by_name END
    WHERE a.id = resolve.action_id;
    INSERT INTO events (kind, action_id, detail)
    VALUES ('resolve', resolve.action_id,
            format('by=%s as=%s', resolve.by_name, resolve.resolution));
    RETURN QUERY SELECT 'resolved'::text, now_state;
END $function$;

CREATE OR REPLACE FUNCTION courier.schedule_problem(not_before timestamp with time zone, expires_at timestamp with time zone, at timestamp with time zone)
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION courier.store_configure(store text, rate_per_s double precision, burst integer, in_flight_max integer, by_name text)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO '$user', 'public'
AS $function$
#variable_conflict use_column
DECLARE
    old record;
BEGIN
    IF store_configure.store IS NULL OR length(store_configure.store) > 64
       OR store_configure.store !~ '^[A-Za-z0-9._-]+$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'store: 1 to 64 characters of A-Z a-z 0-9 - _ .';
    END IF;
    INSERT INTO stores (store) VALUES (store_configure.store) ON CONFLICT (store) DO NOTHING;
    SELECT s.rate_per_s, s.burst, s.in_flight_max INTO old
    FROM stores s WHERE s.store = store_configure.store FOR NO KEY UPDATE;
    UPDATE stores s
    SET rate_per_s = store_configure.rate_per_s,
        burst = store_configure.burst,
        in_flight_max = store_configure.in_flight_max,
        tokens = CASE WHEN s.rate_per_s IS NOT DISTINCT FROM store_configure.rate_per_s
                       AND s.burst IS NOT DISTINCT FROM store_configure.burst
                      THEN s.tokens END,
        tokens_at = CASE WHEN s.rate_per_s IS NOT DISTINCT FROM store_configure.rate_per_s
                          AND s.burst IS NOT DISTINCT FROM store_configure.burst
                         THEN s.tokens_at END,
        configured_at = now()
    WHERE s.store = store_configure.store;
    INSERT INTO events (kind, detail)
    VALUES ('store_settings',
            format('store=%s by=%s rate_per_s=%s->%s burst=%s->%s in_flight_max=%s->%s',
                   store_configure.store, by_name,
                   coalesce(old.rate_per_s::text, 'none'), coalesce(store_configure.rate_per_s::text, 'none'),
                   coalesce(old.burst::text, 'none'), coalesce(store_configure.burst::text, 'none'),
                   coalesce(old.in_flight_max::text, 'default'),
                   coalesce(store_configure.in_flight_max::text, 'default')));
    RETURN now();
END $function$;

CREATE OR REPLACE FUNCTION courier.store_problem(store text)
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN store IS NULL OR length(store) > 64 OR store !~ '^[A-Za-z0-9._-]+$' THEN
        ARRAY['store', 'bad_store', 'store must be 1..64 characters of A-Z a-z 0-9 - _ .']
    END
$function$;

CREATE OR REPLACE FUNCTION courier.uuid_v7()
 RETURNS uuid
 LANGUAGE sql
 PARALLEL SAFE
AS $function$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$function$;

-- Triggers
CREATE TRIGGER actions_count_delete AFTER DELETE ON actions REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_actions();
CREATE TRIGGER actions_count_insert AFTER INSERT ON actions REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_actions();
CREATE TRIGGER actions_count_update AFTER UPDATE ON actions REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_actions();
CREATE TRIGGER actions_held_done_delete AFTER DELETE ON actions REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_held_done_delete();
CREATE TRIGGER actions_held_done_insert AFTER INSERT ON actions REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION courier_held_done_insert();
CREATE TRIGGER actions_held_done_update AFTER UPDATE ON actions REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_held_done_update();
CREATE TRIGGER actions_ready_delete AFTER DELETE ON actions REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_ready_delete();
CREATE TRIGGER actions_ready_insert AFTER INSERT ON actions REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION courier_ready_insert();
CREATE TRIGGER actions_ready_update AFTER UPDATE ON actions REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_ready_update();
CREATE TRIGGER actions_store_work AFTER INSERT ON actions REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION courier_store_work_add();
CREATE TRIGGER api_tokens_bump AFTER INSERT OR DELETE OR UPDATE ON api_tokens FOR EACH STATEMENT EXECUTE FUNCTION courier_api_tokens_bump();
CREATE TRIGGER events_count_delete AFTER DELETE ON events REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_events();
CREATE TRIGGER events_count_insert AFTER INSERT ON events REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_events();
CREATE TRIGGER outbox_accepts_update AFTER UPDATE ON outbox REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_accepts_update();
CREATE TRIGGER outbox_count_delete AFTER DELETE ON outbox REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_outbox();
CREATE TRIGGER outbox_count_insert AFTER INSERT ON outbox REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_outbox();
CREATE TRIGGER outbox_count_update AFTER UPDATE ON outbox REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_outbox();
CREATE TRIGGER outbox_watched_delete AFTER DELETE ON outbox REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_watched_delete();
CREATE TRIGGER outbox_watched_insert AFTER INSERT ON outbox REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION courier_watched_insert();
CREATE TRIGGER outbox_watched_update AFTER UPDATE ON outbox REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_watched_update();
CREATE TRIGGER stores_count_delete AFTER DELETE ON stores REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_stores();
CREATE TRIGGER stores_count_insert AFTER INSERT ON stores REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION courier_count_stores();

-- Comments
COMMENT ON COLUMN stores.in_flight IS 'Claimed actions of this store, less the releases in store_releases not yet folded in: claims add and fold under the store row''s lock; settles and fails only append releases. Read store_in_flight for the count.';
