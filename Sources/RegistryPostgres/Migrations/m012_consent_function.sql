-- A consent change in one statement, so it is one round trip and can be committed with others (group commit): the
-- steps PostgresConsentStore.record took one statement at a time. The installation's row lock comes first; each
-- later statement of this VOLATILE function takes a new snapshot in READ COMMITTED, so the previous decision is read
-- after the lock, as it was.
--
-- installed: false when there is no such installation (nothing written). prior: the purpose's previous decision.
-- Withdrawing messaging consent disables the installation's active registrations and says so in the feed.
CREATE FUNCTION registry_consent(
    p_project text, p_fid text, p_purpose text, p_granted boolean, p_policy_version text, p_source text,
    p_actor text, p_at timestamptz, p_messaging text, p_active text, p_disabled text, p_changed_event text,
    p_changed_data text, p_disabled_event text)
RETURNS TABLE (installed boolean, prior boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_disabled bigint;
BEGIN
    PERFORM 1 FROM installations WHERE project_id = p_project AND fid = p_fid FOR UPDATE;
    IF NOT FOUND THEN
        installed := false;
        RETURN NEXT;
        RETURN;
    END IF;
    installed := true;
    SELECT c.granted INTO prior FROM consents c
        WHERE c.project_id = p_project AND c.fid = p_fid AND c.purpose = p_purpose;
    INSERT INTO consents AS c (project_id, fid, purpose, granted, policy_version, source, actor, updated_at)
    VALUES (p_project, p_fid, p_purpose, p_granted, p_policy_version, p_source, p_actor, p_at)
    ON CONFLICT (project_id, fid, purpose) DO UPDATE SET granted = excluded.granted,
        policy_version = excluded.policy_version, source = excluded.source, actor = excluded.actor,
        updated_at = excluded.updated_at;
    INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, policy_version, recorded_at)
    VALUES (p_project, p_fid, p_purpose, p_granted, prior, p_actor, p_source, p_policy_version, p_at);
    INSERT INTO event_outbox (project_id, type, fid, data) VALUES (p_project, p_changed_event, p_fid, p_changed_data);
    IF p_purpose = p_messaging AND NOT p_granted THEN
        UPDATE registrations r SET state = p_disabled
            WHERE r.project_id = p_project AND r.fid = p_fid AND r.state = p_active;
        GET DIAGNOSTICS v_disabled = ROW_COUNT;
        IF v_disabled > 0 THEN
            INSERT INTO event_outbox (project_id, type, fid) VALUES (p_project, p_disabled_event, p_fid);
        END IF;
    END IF;
    RETURN NEXT;
END
$$;
