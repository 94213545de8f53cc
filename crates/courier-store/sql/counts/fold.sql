-- Folds the counts' deltas into `counts`, deleting exactly the deltas it
-- adds (a delta appended meanwhile stays for the next fold). Only the
-- pruner runs it, under its advisory lock. Answers the deltas folded.
WITH d AS (
    DELETE FROM count_deltas RETURNING name, n
), s AS (
    SELECT name, sum(n)::bigint AS n FROM d GROUP BY name
), folded AS (
    INSERT INTO counts (name, n) SELECT name, n FROM s
    ON CONFLICT (name) DO UPDATE SET n = counts.n + excluded.n
)
SELECT count(*) FROM d
