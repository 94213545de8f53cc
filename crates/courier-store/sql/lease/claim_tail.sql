-- The tail of both claims: take the `chosen` pending actions, count them
-- against their stores, and, when $5, write each fresh action's send intent
-- with its first attempt counted, in this same statement (so under the very
-- compare-and-set that proves the claim). The key is `courier-` and the uid
-- in simple form, as `courier_core::action_key` makes it (a test checks both
-- agree). A reclaimed action keeps the intent it has: its owner reads it and
-- decides (a counted attempt means a lookup first). Each claim's middle
-- defines `chosen`, `released` (the store releases it folds) and
-- `locked_stores` (the store rows it holds, a superset of the chosen
-- actions' stores) and `sweep` (stores whose store_work rows may be left
-- without work: returned as rows with no action, `sweep` set, for the
-- caller to pass to courier_store_work_sweep); the gate (claim_gate.sql)
-- defines `gate`, `pause` and `budget`, and a pause in force comes back as
-- one more row with no action, `paused_ms` set. Each action comes with the
-- milliseconds from the claim's time to its expires_at (NULL: none), which
-- the owner turns into a deadline on its own clock, as it does the lease.
claimed AS (
    UPDATE actions a
    SET state = 'claimed', owner = $1, epoch = a.epoch + 1,
        lease_until = coalesce($6::timestamptz, now()) + $3 * interval '1 millisecond',
        claimed_at = coalesce($6::timestamptz, now())
    FROM chosen c WHERE a.id = c.id
    RETURNING a.id, a.uid, a.store, a.recipient, a.body, a.epoch, false AS reclaimed,
              (extract(epoch FROM a.expires_at - coalesce($6::timestamptz, now())) * 1000)::bigint
                  AS expires_in_ms
),
served AS (
    UPDATE stores st
    SET in_flight = st.in_flight + coalesce(c.n, 0) - coalesce(r.n, 0),
        -- A store with a rate pays a token for each action taken.
        tokens = CASE WHEN st.rate_per_s IS NULL OR c.n IS NULL THEN st.tokens
                      ELSE courier_tokens(st.rate_per_s, st.burst, st.tokens, st.tokens_at,
                                          coalesce($6::timestamptz, now())) - c.n END,
        tokens_at = CASE WHEN st.rate_per_s IS NULL OR c.n IS NULL THEN st.tokens_at
                         ELSE GREATEST(coalesce(st.tokens_at, coalesce($6::timestamptz, now())),
                                       coalesce($6::timestamptz, now())) END,
        last_served_at = CASE WHEN c.n > 0 THEN clock_timestamp() ELSE st.last_served_at END
    FROM locked_stores u
    LEFT JOIN (SELECT store, count(*)::int AS n FROM chosen GROUP BY store) c ON c.store = u.store
    LEFT JOIN (SELECT store, sum(n)::int AS n FROM released GROUP BY store) r ON r.store = u.store
    WHERE st.store = u.store AND (c.n IS NOT NULL OR r.n IS NOT NULL)
),
-- The served stores go to the back of store_work's line too (their rows
-- exist: they had a pending action, and only a sweep holding the store row
-- removes a row). Joined through `locked_stores`, so that a store_work row
-- is written only once this statement holds its store row: the FIFO
-- claim waits for store rows, and must not hold a store_work row that a
-- fair claim holding the store row wants (tests/batch.rs races the two).
work_served AS (
    UPDATE store_work w SET last_served_at = clock_timestamp()
    FROM locked_stores u
    WHERE w.store = u.store AND u.store IN (SELECT store FROM chosen)
),
-- The provider's ceiling pays a token for each action taken (its row is
-- locked by `gate`, so no other claim debited it meanwhile).
gate_paid AS (
    UPDATE provider_gates g
    SET tokens = gt.tokens - (SELECT count(*) FROM chosen),
        tokens_at = GREATEST(coalesce(g.tokens_at, coalesce($6::timestamptz, now())),
                             coalesce($6::timestamptz, now()))
    FROM gate gt
    WHERE g.provider = gt.provider AND EXISTS (SELECT 1 FROM chosen)
),
intents AS (
    INSERT INTO outbox (action_id, idem_key, epoch_written, attempts)
    SELECT id, 'courier-' || replace(uid::text, '-', ''), epoch, 1 FROM claimed WHERE $5
    ON CONFLICT (action_id) DO NOTHING
    RETURNING action_id
)
SELECT r.*, false AS counted, NULL::text AS sweep, NULL::bigint AS paused_ms FROM reclaimed r
UNION ALL
SELECT c.*, EXISTS (SELECT 1 FROM intents i WHERE i.action_id = c.id) AS counted,
       NULL::text AS sweep, NULL::bigint
FROM claimed c
UNION ALL
SELECT NULL::bigint, NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::bigint, false,
       NULL::bigint, false,
       w.store, NULL::bigint
FROM sweep w
UNION ALL
SELECT NULL::bigint, NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::bigint, false,
       NULL::bigint, false,
       NULL::text, p.ms
FROM pause p
