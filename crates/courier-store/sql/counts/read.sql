-- Every maintained count (counts plus the deltas not yet folded), by name.
SELECT name, n FROM counts_now ORDER BY name
