-- An action's epoch now (no row: the action does not exist). $1 id.
SELECT epoch FROM actions WHERE id = $1
