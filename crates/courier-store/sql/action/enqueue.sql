-- A new action; nothing if (store, client key) exists. $1 uid, $2 store,
-- $3 client key, $4 recipient, $5 body.
INSERT INTO actions (uid, store, client_key, recipient, body)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (store, client_key) WHERE client_key IS NOT NULL DO NOTHING
RETURNING id
