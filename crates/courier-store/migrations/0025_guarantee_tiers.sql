-- courier schema, version 25: guarantee tiers (courier_core::tier). A
-- provider without a lookup, or whose key's window has passed, leaves some
-- actions with an outcome nobody can know; they are held, not resent.
--
-- The new state:
-- - 'unknown': ended by its worker (sql/settle/hold.sql, fenced like a
--   settle, its store's slot released) after an attempt whose outcome is
--   unknown, when the tier offers no way to find out. Not final: a webhook
--   that carries the action's key is evidence of a send and moves it on
--   (merge/write.sql: 'dispatched', or 'done' on a final status), and an
--   operator resolves it (courier.resolve): as sent ('done') or as not sent
--   ('failed'), which courier.redrive then admits like a 400. The hold
--   writes an `events` row ('held_unknown') in the same statement, so the
--   operators' list of held actions (sql/report/unknown.sql) walks
--   events_kind_id, never `actions`: no index on `actions.state`, which
--   would make every state change a non-HOT update (migration 13).
--
-- The new CHECKs are added NOT VALID and validated by version 26 outside
-- any transaction, as versions 23 and 24 did.

ALTER TABLE actions
    -- An operator's resolution of an 'unknown' action.
    ADD COLUMN resolved_as text,
    DROP CONSTRAINT actions_state_check,
    ADD CONSTRAINT actions_state_check CHECK (state = ANY (ARRAY[
        'scheduled', 'pending', 'claimed', 'dispatched', 'done', 'failed',
        'cancelled', 'expired', 'unknown'])) NOT VALID,
    ADD CONSTRAINT actions_resolved_as_check
        CHECK (resolved_as IS NULL OR resolved_as IN ('sent', 'not_sent')) NOT VALID;

-- Resolves one action held 'unknown': `resolution` 'sent' ends it 'done'
-- (the operator knows the provider has the message), 'not_sent' ends it
-- 'failed' (nothing went out: courier.redrive admits it). `stores` and
-- `by_name` as for courier.cancel; an `events` row ('resolve') records who.
-- Answers one row: outcome 'resolved', 'not_found' (as for cancel),
-- 'refused' (it is not 'unknown': the state it is in), or 'invalid' (a
-- resolution other than the two).
CREATE FUNCTION courier.resolve(action_id bigint, resolution text, by_name text,
                                stores text[] DEFAULT NULL)
    RETURNS TABLE (outcome text, state text)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    found_state text;
    now_state text;
BEGIN
    IF resolve.resolution IS NULL OR resolve.resolution NOT IN ('sent', 'not_sent') THEN
        RETURN QUERY SELECT 'invalid'::text, NULL::text;
        RETURN;
    END IF;
    SELECT a.state INTO found_state FROM actions a
    WHERE a.id = resolve.action_id
      AND (resolve.stores IS NULL OR a.store = ANY (resolve.stores))
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text;
        RETURN;
    END IF;
    IF found_state <> 'unknown' THEN
        RETURN QUERY SELECT 'refused'::text, found_state;
        RETURN;
    END IF;
    now_state := CASE resolve.resolution WHEN 'sent' THEN 'done' ELSE 'failed' END;
    UPDATE actions a SET state = now_state, done_at = now(), resolved_as = resolve.resolution,
        fail_reason = CASE WHEN now_state = 'failed'
                           THEN 'not sent: resolved by ' || resolve.by_name END
    WHERE a.id = resolve.action_id;
    INSERT INTO events (kind, action_id, detail)
    VALUES ('resolve', resolve.action_id,
            format('by=%s as=%s', resolve.by_name, resolve.resolution));
    RETURN QUERY SELECT 'resolved'::text, now_state;
END $$;

-- Re-drive, as in version 23, admitting an action an operator resolved as
-- not sent (it created nothing, as a 400 did), and refusing any action
-- whose outbox a provider's report has moved past 'sending'.
CREATE OR REPLACE FUNCTION courier.redrive(action_id bigint, by_name text, stores text[] DEFAULT NULL)
    RETURNS TABLE (outcome text, new_id bigint, state text, reason text)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    old record;
    made bigint;
    reported text;
BEGIN
    SELECT a.id, a.store, a.recipient, a.body, a.state, a.fail_status, a.resolved_as,
           a.redriven_as
    INTO old FROM actions a
    WHERE a.id = redrive.action_id
      AND (redrive.stores IS NULL OR a.store = ANY (redrive.stores))
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::bigint, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF old.redriven_as IS NOT NULL THEN
        RETURN QUERY SELECT 'already'::text, old.redriven_as, old.state, NULL::text;
        RETURN;
    END IF;
    IF old.state <> 'failed' THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, old.state,
            CASE WHEN old.state IN ('cancelled', 'expired')
                 THEN 'it was never sent: enqueue it again'
                 WHEN old.state = 'unknown'
                 THEN 'its outcome is unknown: resolve it as not sent first'
                 ELSE 'only an action the provider refused, or one resolved as not sent, can be re-driven' END;
        RETURN;
    END IF;
    IF old.fail_status IS DISTINCT FROM 400 AND old.resolved_as IS DISTINCT FROM 'not_sent' THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, old.state,
            CASE WHEN old.fail_status = 422
                 THEN 'the provider answered 422: its key already has a message'
                 ELSE 'the provider did not answer 400: the send may have had an effect' END;
        RETURN;
    END IF;
    -- Evidence beats a resolution: a webhook that carried the key after an
    -- operator said "not sent" (the merge leaves a failed action as it is)
    -- shows the message went out.
    SELECT o.status INTO reported FROM outbox o WHERE o.action_id = old.id;
    IF reported IS NOT NULL AND reported <> 'sending' THEN
        RETURN QUERY SELECT 'refused'::text, NULL::bigint, old.state,
            format('the provider reported its message (%s): it went out', reported);
        RETURN;
    END IF;
    INSERT INTO actions (uid, store, recipient, body, redrive_of)
    VALUES (courier.uuid_v7(), old.store, old.recipient, old.body, old.id)
    RETURNING actions.id INTO made;
    UPDATE actions a SET redriven_as = made WHERE a.id = old.id;
    INSERT INTO events (kind, action_id, detail)
    VALUES ('redrive', old.id, format('by=%s as=%s', redrive.by_name, made));
    RETURN QUERY SELECT 'redriven'::text, made, 'pending'::text, NULL::text;
END $$;
