-- A client's own registration (the FCM SDKs' create and update) in one statement, so it is one round trip and can be
-- committed with others (group commit): the steps PostgresRegistrationStore.register took one statement at a time.
-- The installation's row lock comes first; each later statement of this VOLATILE function takes a new snapshot in
-- READ COMMITTED, so consent and the stored registration are read after the lock, as they were.
--
-- outcome: 'not_found', 'consent_off' or 'written' (reg is the row as written; existed says whether the installation
-- had a registration, which keeps its token and its creation time).
CREATE FUNCTION registry_register(
    p_project text, p_fid text, p_token text, p_platform text, p_apns_token text, p_apns_environment text,
    p_bundle_id text, p_app_version text, p_sdk_version text, p_web_endpoint text, p_web_auth text,
    p_web_p256dh text, p_web_app_key text, p_web_origin text, p_state text, p_client_time timestamptz,
    p_created_at timestamptz, p_refreshed_at timestamptz, p_purpose text, p_created_event text,
    p_refreshed_event text, p_event_data text)
RETURNS TABLE (outcome text, existed boolean, reg registrations)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_granted boolean;
    v_written registrations;
BEGIN
    PERFORM 1 FROM installations WHERE project_id = p_project AND fid = p_fid FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT c.granted INTO v_granted FROM consents c
        WHERE c.project_id = p_project AND c.fid = p_fid AND c.purpose = p_purpose;
    IF NOT coalesce(v_granted, false) THEN
        outcome := 'consent_off';
        RETURN NEXT;
        RETURN;
    END IF;
    existed := EXISTS (SELECT 1 FROM registrations r WHERE r.project_id = p_project AND r.fid = p_fid);
    INSERT INTO registrations AS r (project_id, fid, token, platform, apns_token, apns_environment, bundle_id,
        app_version, sdk_version, web_endpoint, web_auth, web_p256dh, web_app_key, web_origin, state, client_time,
        created_at, refreshed_at)
    VALUES (p_project, p_fid, p_token, p_platform, p_apns_token, p_apns_environment, p_bundle_id, p_app_version,
        p_sdk_version, p_web_endpoint, p_web_auth, p_web_p256dh, p_web_app_key, p_web_origin, p_state, p_client_time,
        p_created_at, p_refreshed_at)
    ON CONFLICT (project_id, fid) DO UPDATE SET platform = excluded.platform, apns_token = excluded.apns_token,
        apns_environment = excluded.apns_environment, bundle_id = excluded.bundle_id,
        app_version = excluded.app_version, sdk_version = excluded.sdk_version, web_endpoint = excluded.web_endpoint,
        web_auth = excluded.web_auth, web_p256dh = excluded.web_p256dh, web_app_key = excluded.web_app_key,
        web_origin = excluded.web_origin, state = excluded.state, client_time = excluded.client_time,
        expired_reported = false, refreshed_at = excluded.refreshed_at
    RETURNING * INTO v_written;
    INSERT INTO event_outbox (project_id, type, fid, data)
    VALUES (p_project, CASE WHEN existed THEN p_refreshed_event ELSE p_created_event END, p_fid, p_event_data);
    outcome := 'written';
    reg := v_written;
    RETURN NEXT;
END
$$;
