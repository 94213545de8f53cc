-- courier schema, version 2: releases of in-flight slots without the store
-- row's lock.
--
-- Before: settle and fail lowered stores.in_flight, so every settle waited
-- for the store row, which claims hold for their whole statement. Now a
-- settle or fail appends a release here (no lock on the store row) and the
-- next claim that holds the store row folds the releases into in_flight
-- (deleting exactly the ones it folds). A release not yet visible to a claim
-- only makes that claim count more in flight, never fewer: the per-store cap
-- is still never exceeded.

CREATE TABLE store_releases (
    id     bigserial PRIMARY KEY,
    -- No foreign key: its check would take a share lock on the store row,
    -- the very wait this table removes. Stores are never deleted, and a
    -- release is only written for an action, which has one.
    store  text NOT NULL,
    n      integer NOT NULL CHECK (n > 0)
);
CREATE INDEX store_releases_store ON store_releases (store);

-- Actions of each store held by workers now: the counter less the releases
-- not yet folded into it. Read it in one statement (one snapshot).
CREATE VIEW store_in_flight AS
SELECT s.store, s.in_flight - coalesce(r.n, 0)::int AS in_flight
FROM stores s
LEFT JOIN (SELECT store, sum(n) AS n FROM store_releases GROUP BY store) r ON r.store = s.store;

-- The state index served only counts; every change of state paid for it.
-- Counts by state read the table; the claim paths have their partial indexes.
DROP INDEX actions_state;

-- The client-key index only needs the actions that have a client key. As a
-- full index it was also a (wrong) way to find a store's pending actions,
-- and every change of state wrote to it.
ALTER TABLE actions DROP CONSTRAINT actions_store_client_key_key;
CREATE UNIQUE INDEX actions_store_client_key ON actions (store, client_key)
    WHERE client_key IS NOT NULL;
