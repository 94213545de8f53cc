-- Events by kind.
SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind
