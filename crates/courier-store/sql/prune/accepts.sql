-- Trims, of the $2 oldest acceptances in outbox_accepts, the ones older
-- than $3 s (views.rs, ACCEPTS_KEEP_S): the table keeps the recent past the
-- dashboard's sampler walks, not history (migration 19). Walked in primary
-- key order, so the statement reads at most $2 keys whatever the
-- statistics. $1 now (NULL: the database's clock). Answers how many it
-- removed.
WITH gone AS (
    DELETE FROM outbox_accepts x
    WHERE (x.accepted_at, x.action_id) IN (
        SELECT accepted_at, action_id FROM (
            SELECT accepted_at, action_id FROM outbox_accepts
            ORDER BY accepted_at, action_id LIMIT $2) oldest
        WHERE accepted_at < coalesce($1::timestamptz, now()) - $3::float8 * interval '1 second')
    RETURNING 1
)
SELECT count(*) FROM gone
