-- courier schema, version 27: flow control (courier_core::rate). A store
-- may be given a rate (sends a second, shared by every worker, with a
-- burst) and an in-flight cap of its own; a provider may be given a ceiling
-- and is paused, for every worker, when it answers "too many requests".
--
-- Both buckets are metered by the claim (sql/lease/claim_fair.sql), in the
-- rows it already locks: a store's tokens in its `stores` row (locked FOR
-- NO KEY UPDATE by every fair claim that takes from it, so concurrent
-- claimers debit it one after another and it stays exact), a provider's in
-- its `provider_gates` row (locked by a claim only when it has a ceiling).
-- A bucket is stored as the tokens it held at `tokens_at`, refilled lazily
-- at the rate up to the burst (courier_tokens); NULL tokens: full.
--
-- Settings change with courier.store_configure / courier.provider_configure,
-- each writing an `events` row ('store_settings', 'provider_settings') in
-- the same transaction. None of the new columns is indexed, so the claim's
-- updates of `stores` stay HOT.
--
-- The CHECKs are added NOT VALID and validated by version 28 outside any
-- transaction (a million stores' rows are read once, without blocking
-- claims).

ALTER TABLE stores
    ADD COLUMN rate_per_s    double precision,
    ADD COLUMN burst         integer,
    ADD COLUMN in_flight_max integer,
    ADD COLUMN tokens        double precision,
    ADD COLUMN tokens_at     timestamptz,
    ADD COLUMN configured_at timestamptz,
    ADD CONSTRAINT stores_rate_check CHECK (
        (rate_per_s IS NULL AND burst IS NULL)
        OR (rate_per_s BETWEEN 0.001 AND 100000 AND burst BETWEEN 1 AND 100000)) NOT VALID,
    ADD CONSTRAINT stores_in_flight_max_check
        CHECK (in_flight_max IS NULL OR in_flight_max BETWEEN 1 AND 10000) NOT VALID;

CREATE TABLE provider_gates (
    provider      text PRIMARY KEY CHECK (length(provider) BETWEEN 1 AND 64),
    rate_per_s    double precision,
    burst         integer,
    tokens        double precision,
    tokens_at     timestamptz,
    -- No claim takes work for this provider before this time (a 429).
    paused_until  timestamptz,
    pauses        bigint NOT NULL DEFAULT 0,
    configured_at timestamptz,
    CHECK ((rate_per_s IS NULL AND burst IS NULL)
           OR (rate_per_s BETWEEN 0.001 AND 100000 AND burst BETWEEN 1 AND 100000))
);

-- The tokens a bucket holds at `at_time`: `tokens` at `tokens_at`, refilled at
-- `rate` a second up to `burst` (NULL tokens: a full bucket; a time before
-- `tokens_at`, as a claim that began before another's commit sees, adds
-- nothing). NULL without a rate. Inlined by the planner (one SQL
-- expression, IMMUTABLE).
CREATE FUNCTION courier_tokens(rate double precision, burst integer,
                               tokens double precision, tokens_at timestamptz,
                               at_time timestamptz)
    RETURNS double precision LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN rate IS NULL THEN NULL
                ELSE LEAST(burst::double precision,
                           coalesce(tokens, burst::double precision)
                           + rate * GREATEST(0, extract(epoch FROM (at_time - coalesce(tokens_at, at_time)))))
           END
$$;

-- Sets one store's settings (NULLs: no rate, the worker's cap), creating
-- the store if it has never been seen, and records the change, old and new,
-- as an `events` row ('store_settings') naming `by_name`. A new or changed
-- rate starts with a full bucket. Answers the time of the change.
CREATE FUNCTION courier.store_configure(store text, rate_per_s double precision,
                                        burst integer, in_flight_max integer, by_name text)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
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
END $$;

-- Sets one provider's ceiling (NULLs: none), as courier.store_configure
-- does a store's ('provider_settings' events). A pause in force stays.
CREATE FUNCTION courier.provider_configure(provider text, rate_per_s double precision,
                                           burst integer, by_name text)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
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
END $$;

-- Pauses a provider for every worker until `pause_ms` from now (a later
-- pause in force is kept), after it answered "too many requests". Answers
-- the milliseconds the pause now lasts. One `events` row per pause begun
-- ('provider_paused'), none for a pause only confirmed. `at_time`: the time
-- (NULL: the database's clock; the tests' simulated clock passes its own).
CREATE FUNCTION courier.provider_pause(provider text, pause_ms bigint,
                                       at_time timestamptz DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
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
END $$;
