-- courier:no-transaction
-- courier schema, version 28: validates the CHECKs version 27 added NOT
-- VALID, outside any transaction (as version 26 does for 25's).
ALTER TABLE stores VALIDATE CONSTRAINT stores_rate_check;
ALTER TABLE stores VALIDATE CONSTRAINT stores_in_flight_max_check;
