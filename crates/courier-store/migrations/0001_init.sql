-- courier schema, version 1.
-- Every write after a claim is fenced on (owner, epoch); these constraints are
-- the database's copy of the invariants that courier-core asserts and the
-- tests name.

CREATE TABLE stores (
    store          text PRIMARY KEY CHECK (length(store) BETWEEN 1 AND 64),
    -- Actions of this store held by workers (state 'claimed'); kept exact by
    -- claim (+), settle and fail (-), under the store row's lock.
    in_flight      integer NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
    -- NULL sorts first: a store never served is next in line.
    last_served_at timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE actions (
    id             bigserial PRIMARY KEY,
    -- Drawn once at enqueue; the idempotency key derives from it.
    uid            uuid NOT NULL UNIQUE,
    store          text NOT NULL REFERENCES stores (store),
    client_key     text CHECK (client_key IS NULL OR length(client_key) BETWEEN 1 AND 255),
    recipient      text NOT NULL,
    body           text NOT NULL CHECK (length(body) BETWEEN 1 AND 1600),
    state          text NOT NULL DEFAULT 'pending'
                   CHECK (state IN ('pending', 'claimed', 'dispatched', 'done', 'failed')),
    owner          text,
    -- The fencing token: +1 at every claim.
    epoch          bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    lease_until    timestamptz,
    enqueued_at    timestamptz NOT NULL DEFAULT now(),
    claimed_at     timestamptz,
    dispatched_at  timestamptz,
    done_at        timestamptz,
    fail_reason    text,
    UNIQUE (store, client_key),
    CHECK (state <> 'claimed' OR (owner IS NOT NULL AND lease_until IS NOT NULL AND epoch > 0)),
    CHECK (state = 'claimed' OR lease_until IS NULL)
);
CREATE INDEX actions_pending_by_store ON actions (store, id) WHERE state = 'pending';
CREATE INDEX actions_pending_fifo ON actions (id) WHERE state = 'pending';
CREATE INDEX actions_lease ON actions (lease_until) WHERE state = 'claimed';
CREATE INDEX actions_state ON actions (state);

-- The send intent: written once per action, ever, in the same transaction as
-- the compare-and-set on (owner, epoch).
CREATE TABLE outbox (
    action_id      bigint PRIMARY KEY REFERENCES actions (id),
    idem_key       text NOT NULL UNIQUE CHECK (length(idem_key) BETWEEN 1 AND 255),
    epoch_written  bigint NOT NULL CHECK (epoch_written > 0),
    status         text NOT NULL DEFAULT 'sending'
                   CHECK (status IN ('sending', 'accepted', 'sent', 'delivered', 'failed')),
    -- Counted (fenced) before each request leaves.
    attempts       integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lookups        integer NOT NULL DEFAULT 0 CHECK (lookups >= 0),
    message_id     text,
    -- Two different final statuses were reported: only a lookup settles it.
    conflict       boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now(),
    accepted_at    timestamptz,
    final_at       timestamptz,
    next_check_at  timestamptz,
    CHECK ((status IN ('delivered', 'failed')) = (final_at IS NOT NULL))
);
CREATE INDEX outbox_next_check ON outbox (next_check_at) WHERE next_check_at IS NOT NULL;
CREATE INDEX outbox_open ON outbox (created_at) WHERE status NOT IN ('delivered', 'failed');

-- Webhook event ids, recorded in the same transaction as their merge.
CREATE TABLE webhook_events (
    event_id       text PRIMARY KEY,
    idem_key       text NOT NULL,
    status         text NOT NULL,
    outcome        text NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now()
);

-- Notable moments, for status, metrics and the chaos report: fenced writes
-- refused, backward reports, duplicate webhooks, conflicts, rejections, reclaims.
CREATE TABLE events (
    id             bigserial PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT now(),
    kind           text NOT NULL,
    action_id      bigint,
    detail         text NOT NULL DEFAULT ''
);
CREATE INDEX events_kind ON events (kind);
