-- Attempts and lookups of every intent.
SELECT coalesce(sum(attempts), 0)::bigint, coalesce(sum(lookups), 0)::bigint FROM outbox
