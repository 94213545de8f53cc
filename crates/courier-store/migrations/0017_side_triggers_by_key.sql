-- courier schema, version 17: the trigger statements that keep the side
-- tables (actions_ready, actions_held, actions_done, intents_watched) reach
-- their rows by key, never by a sequential scan.
--
-- Each joins the statement's transition table (a batch: 1-64 rows) to its
-- side table by primary key. PL/pgSQL plans such a statement once per
-- session and keeps the plan until the table's statistics change; a plan
-- made while the table was small, or after a vacuum that found it empty,
-- hashes the batch and scans the whole table. Between two autovacuum passes
-- (at most one a minute) intents_watched gained about 18,000 dead rows in
-- `courier bench history`, and its delete took 15-25 ms of a 27 ms settle
-- (883 such deletes over 25 ms in one round, auto_explain). With sequential
-- scans off for these functions' own statements (as migration 8 does for
-- the open-intents walk), the one plan left is a lookup per row of the
-- batch. tests/intents_watched.rs counts the side table's sequential scans
-- across a settle planned while the table was small, with this setting and
-- without it (the control).
ALTER FUNCTION courier_ready_update() SET enable_seqscan = off;
ALTER FUNCTION courier_ready_delete() SET enable_seqscan = off;
ALTER FUNCTION courier_held_done_update() SET enable_seqscan = off;
ALTER FUNCTION courier_held_done_delete() SET enable_seqscan = off;
ALTER FUNCTION courier_watched_update() SET enable_seqscan = off;
ALTER FUNCTION courier_watched_delete() SET enable_seqscan = off;
