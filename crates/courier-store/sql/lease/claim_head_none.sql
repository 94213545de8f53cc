-- The head of a claim that does not look for expired leases this time
-- (`ClaimReq::reclaim` off; the worker looks at most once a second while its
-- claims come back full, `RECLAIM_EVERY_MS` in courier-dispatch's
-- src/worker/pacing.rs): no action is reclaimed. The columns of
-- claim_head.sql's.
reclaimed AS (
    SELECT NULL::bigint AS id, NULL::uuid AS uid, NULL::text AS store, NULL::text AS recipient,
           NULL::text AS body, NULL::bigint AS epoch, true AS reclaimed,
           NULL::bigint AS expires_in_ms
    WHERE false
),
