-- The busiest $1 stores: pending actions plus those held by workers, then
-- the oldest pending action's age. Only stores with work are looked at:
-- those listed in store_work (a pending action) and those of claimed
-- actions (actions_held, migration 13), so the cost follows
-- the stores with work, not the stores registered (with 1,000,000 mostly
-- idle stores, a list over every store row read all of them at every
-- dashboard sample). A store's in-flight count is its counter less the
-- releases not yet folded, as in the view store_in_flight. $2 the time
-- (NULL: the database's clock, see src/clock.rs).
SELECT b.store, b.in_flight, b.pending, b.oldest_pending_s
FROM (
    SELECT st.store,
           (st.in_flight - coalesce((SELECT sum(r.n) FROM store_releases r
                                     WHERE r.store = st.store), 0))::int AS in_flight,
           coalesce(p.pending, 0) AS pending,
           extract(epoch FROM coalesce($2::timestamptz, now())
                              - (SELECT a.enqueued_at FROM actions a
                                 WHERE a.id = p.first_id))::float8 AS oldest_pending_s
    FROM (SELECT store FROM store_work
          UNION
          SELECT store FROM actions_held) busy
    JOIN stores st ON st.store = busy.store
    -- The pending actions from actions_ready (migration 12: its size
    -- follows the backlog, not history); the oldest is the one first in id
    -- order (ids are drawn as actions are enqueued).
    LEFT JOIN LATERAL (
        SELECT count(*) AS pending, min(r.id) AS first_id
        FROM actions_ready r WHERE r.store = st.store) p ON true
) b
ORDER BY b.pending + b.in_flight DESC, b.store
LIMIT $1
