-- The action a client key names. $1 store, $2 client key.
SELECT id, recipient, body FROM actions WHERE store = $1 AND client_key = $2
