-- Actions by state.
SELECT state, count(*) AS n FROM actions GROUP BY state ORDER BY state
