-- courier schema, version 4: the final statuses, written once; and a note.
--
-- The statements under sql/ ask `courier_status_is_final(status)` instead
-- of each listing ('delivered', 'failed'); courier-core's Status::is_final is
-- the Rust copy, and tests/schema.rs checks that the two agree for every
-- status. The function is IMMUTABLE and a single expression, so the planner
-- inlines it: a query that says `NOT courier_status_is_final(status)` still
-- matches the predicate of the index outbox_open (migration 1), which lists
-- the statuses itself and stays as it is (migrations are not edited), as
-- does the CHECK on outbox.final_at.
CREATE FUNCTION courier_status_is_final(status text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT status IN ('delivered', 'failed') $$;

-- Schema note on stores.in_flight (migration 1 cannot be edited): its
-- comment there says the count is "kept exact by claim (+), settle and fail
-- (-), under the store row's lock". Since migration 2 settles and fails do
-- not touch the store row: they append to store_releases, a claim that
-- holds the store row folds those releases into in_flight, and the count
-- of a store's actions held by workers is the view store_in_flight
-- (in_flight less the releases not yet folded).
COMMENT ON COLUMN stores.in_flight IS
    'Claimed actions of this store, less the releases in store_releases not yet folded in: '
    'claims add and fold under the store row''s lock; settles and fails only append releases. '
    'Read store_in_flight for the count.';
