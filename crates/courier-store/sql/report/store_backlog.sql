-- Each store's in-flight count and pending actions, busiest first.
SELECT s.store, s.in_flight,
       (SELECT count(*) FROM actions a WHERE a.store = s.store AND a.state = 'pending') AS pending
FROM store_in_flight s ORDER BY pending DESC, s.in_flight DESC, s.store
