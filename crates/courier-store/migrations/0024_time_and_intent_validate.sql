-- courier:no-transaction
-- courier schema, version 24: validates the CHECKs version 23 added NOT
-- VALID, outside any transaction: VALIDATE CONSTRAINT reads every action
-- under SHARE UPDATE EXCLUSIVE, which lets enqueues, claims and settles go
-- on while it reads.
ALTER TABLE actions VALIDATE CONSTRAINT actions_state_check;
ALTER TABLE actions VALIDATE CONSTRAINT actions_expiry_check;
ALTER TABLE actions VALIDATE CONSTRAINT actions_scheduled_check;
