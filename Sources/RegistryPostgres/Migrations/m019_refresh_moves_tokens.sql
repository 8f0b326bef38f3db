-- The token refresh callback decides every case in one call, the move of a token from another installation too: the
-- rule lives here and in the in-memory store only (RefreshOutcome), no longer also in a Swift fallback that ran when
-- this function tripped the unique index on (project_id, token).
--
-- registry_refresh (migration 11) stays for replicas of the previous version during a rolling upgrade; nothing of
-- this version calls it.
--
-- outcome: 'not_found' (no such installation), 'ahead' (clientTime too far ahead of the database's clock),
-- 'consent_off', 'older' (an older clientTime than the stored one: reg is the stored row) or 'written' (reg is the
-- row as written, previous the token it replaced, moved_from the installation the token was taken from).
--
-- Locks: the installation's row first (FOR UPDATE), then its registration, then the registration that holds the
-- token elsewhere, if any: the order the step-by-step path took.
CREATE FUNCTION registry_refresh_token(
    p_project text, p_fid text, p_token text, p_platform text, p_apns_token text, p_apns_environment text,
    p_state text, p_client_time timestamptz, p_created_at timestamptz, p_refreshed_at timestamptz,
    p_max_ahead_seconds float8, p_purpose text, p_created_event text, p_refreshed_event text, p_moved_event text,
    p_event_data text)
RETURNS TABLE (outcome text, previous text, moved_from text, reg registrations)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_ahead   boolean;
    v_granted boolean;
    v_found   boolean;
    v_current registrations;
    v_written registrations;
BEGIN
    SELECT p_client_time > now() + p_max_ahead_seconds * interval '1 second' INTO v_ahead
        FROM installations WHERE project_id = p_project AND fid = p_fid FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_ahead THEN
        outcome := 'ahead';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT granted INTO v_granted FROM consents WHERE project_id = p_project AND fid = p_fid AND purpose = p_purpose;
    IF NOT coalesce(v_granted, false) THEN
        outcome := 'consent_off';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT * INTO v_current FROM registrations WHERE project_id = p_project AND fid = p_fid;
    v_found := FOUND;
    IF v_found THEN
        previous := v_current.token;
        -- RefreshOutcome.accepts(incoming:stored:): a report without a time always replaces; otherwise it must not
        -- be older than the stored one.
        IF v_current.client_time IS NOT NULL AND p_client_time IS NOT NULL AND p_client_time < v_current.client_time
        THEN
            outcome := 'older';
            reg := v_current;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    DELETE FROM registrations WHERE project_id = p_project AND token = p_token AND fid <> p_fid
        RETURNING fid INTO moved_from;
    INSERT INTO registrations AS r (project_id, fid, token, platform, apns_token, apns_environment, state, client_time,
        created_at, refreshed_at)
    VALUES (p_project, p_fid, p_token, p_platform, p_apns_token, p_apns_environment, p_state, p_client_time,
        p_created_at, p_refreshed_at)
    ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, platform = excluded.platform,
        apns_token = excluded.apns_token, apns_environment = excluded.apns_environment, state = excluded.state,
        client_time = excluded.client_time, expired_reported = false,
        created_at = CASE WHEN r.token = excluded.token THEN r.created_at ELSE excluded.created_at END,
        refreshed_at = excluded.refreshed_at
    RETURNING * INTO v_written;
    INSERT INTO event_outbox (project_id, type, fid, data)
    VALUES (p_project,
        CASE WHEN moved_from IS NOT NULL THEN p_moved_event WHEN v_found THEN p_refreshed_event ELSE p_created_event END,
        p_fid, p_event_data);
    outcome := 'written';
    reg := v_written;
    RETURN NEXT;
END
$$;
