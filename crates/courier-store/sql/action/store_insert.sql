-- The action's store, registered on its first action. $1 store.
INSERT INTO stores (store) VALUES ($1) ON CONFLICT (store) DO NOTHING
