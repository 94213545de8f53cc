-- (fragment, the end of a statement) Records the rows of the CTE `ev`
-- (kind, action_id, detail) in events, the one spelling of that insert, and
-- answers how many it recorded.
recorded AS (
    INSERT INTO events (kind, action_id, detail)
    SELECT ev.kind, ev.action_id, ev.detail FROM ev
)
SELECT count(*) AS events FROM ev
