-- courier:no-transaction
-- courier schema, version 26: validates the CHECKs version 25 added NOT
-- VALID, outside any transaction (as version 24 does for 23's).
ALTER TABLE actions VALIDATE CONSTRAINT actions_state_check;
ALTER TABLE actions VALIDATE CONSTRAINT actions_resolved_as_check;
