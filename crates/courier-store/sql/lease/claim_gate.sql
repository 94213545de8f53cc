-- The opening of every claim: the provider's gate ($7, the provider's name;
-- NULL: no gate). While the provider is paused (it answered "too many
-- requests", courier.provider_pause) a claim takes no fresh action; with a
-- ceiling it takes no more than the ceiling's whole tokens. The gate row is
-- locked only when it has a ceiling (FOR UPDATE, waiting: claims for one
-- provider with a ceiling debit it one after another, which keeps it
-- exact); a pause is read from the snapshot, and returned to the caller as
-- a row of its own (`paused_ms`), so every worker that claims learns it.
WITH gate AS (
    SELECT g.provider,
           courier_tokens(g.rate_per_s, g.burst, g.tokens, g.tokens_at,
                          coalesce($6::timestamptz, now())) AS tokens
    FROM provider_gates g
    WHERE g.provider = $7::text AND g.rate_per_s IS NOT NULL
    FOR UPDATE
),
pause AS (
    SELECT (extract(epoch FROM g.paused_until - coalesce($6::timestamptz, now())) * 1000)::bigint
               AS ms
    FROM provider_gates g
    WHERE g.provider = $7::text AND g.paused_until > coalesce($6::timestamptz, now())
),
-- How many fresh actions this claim may take: the batch; none while the
-- provider is paused; no more than its ceiling's whole tokens.
budget AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM pause) THEN 0::bigint
                ELSE LEAST($2::bigint,
                           coalesce((SELECT floor(GREATEST(tokens, 0))::bigint FROM gate),
                                    $2::bigint))
           END AS n
),
