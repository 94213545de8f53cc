-- Owners holding live leases, most first.
SELECT owner, count(*) FROM actions WHERE state = 'claimed' AND lease_until > now()
GROUP BY owner ORDER BY count(*) DESC
