-- One event. $1 kind, $2 action id (or NULL), $3 detail.
WITH ev AS (SELECT $1::text AS kind, $2::bigint AS action_id, $3::text AS detail),
