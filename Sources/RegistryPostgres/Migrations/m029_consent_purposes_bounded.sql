-- A consent change that holds the installation's purposes to a bound (docs/security.md, class 17). Migration 12's
-- `registry_consent` took any number of distinct purposes: an installation could state consent for a million
-- purposes, each a row of `consents` that every consent view and every sendability answer read whole. This is
-- `registry_consent` with the bound checked after the installation's lock (so two concurrent new purposes cannot
-- both take the last place): a purpose the installation does not hold yet, when it holds `p_max_purposes` already,
-- writes nothing and answers `at_bound`. Otherwise the steps, their order and their locks are migration 12's.
-- `registry_consent` itself stays, for replicas of the previous version during a rolling upgrade.
CREATE FUNCTION registry_consent_bounded(
    p_project text, p_fid text, p_purpose text, p_granted boolean, p_policy_version text, p_source text,
    p_actor text, p_at timestamptz, p_messaging text, p_active text, p_disabled text, p_changed_event text,
    p_changed_data text, p_disabled_event text, p_max_purposes int)
RETURNS TABLE (installed boolean, prior boolean, at_bound boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_disabled bigint;
    v_held     boolean;
BEGIN
    at_bound := false;
    PERFORM 1 FROM installations WHERE project_id = p_project AND fid = p_fid FOR UPDATE;
    IF NOT FOUND THEN
        installed := false;
        RETURN NEXT;
        RETURN;
    END IF;
    installed := true;
    SELECT c.granted, true INTO prior, v_held FROM consents c
        WHERE c.project_id = p_project AND c.fid = p_fid AND c.purpose = p_purpose;
    IF v_held IS NULL
        AND (SELECT count(*) FROM consents c WHERE c.project_id = p_project AND c.fid = p_fid) >= p_max_purposes
    THEN
        at_bound := true;
        RETURN NEXT;
        RETURN;
    END IF;
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
