-- courier schema, version 22: who may send.
--
-- API tokens, each scoped to stores (a store token enqueues and reads only
-- its stores' actions) or an admin's (every store, the dashboard's data,
-- /metrics). A token is shown once, at creation: `courier_<id>_<secret>`;
-- only the SHA-256 of its secret is kept (the secret is 32 random bytes,
-- so a fast hash is enough), and the server compares it in constant time.
-- Several tokens may be valid for one store at once (rotation); a revoked
-- token stays listed, with the time it was revoked.
CREATE TABLE api_tokens (
    id             bigserial PRIMARY KEY,
    name           text NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    admin          boolean NOT NULL DEFAULT false,
    stores         text[] NOT NULL DEFAULT '{}',
    secret_sha256  bytea NOT NULL CHECK (length(secret_sha256) = 32),
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz,
    -- A store token names at least one store; an admin's names none.
    CHECK (admin = (cardinality(stores) = 0)),
    CHECK (cardinality(stores) <= 1000)
);

-- Bumped by every change of api_tokens: each server process reads this one
-- row a few times a second and reloads the active tokens only when it moved,
-- so a revocation reaches every process within a second.
CREATE TABLE api_tokens_version (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    version  bigint NOT NULL
);
INSERT INTO api_tokens_version (one, version) VALUES (true, 0);

-- Its own planner settings, as every trigger function's (migration 18).
CREATE FUNCTION courier_api_tokens_bump() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_hashjoin = on SET enable_mergejoin = on
    SET enable_seqscan = on SET plan_cache_mode = auto
    AS $$
BEGIN
    UPDATE api_tokens_version SET version = version + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER api_tokens_bump AFTER INSERT OR UPDATE OR DELETE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION courier_api_tokens_bump();
