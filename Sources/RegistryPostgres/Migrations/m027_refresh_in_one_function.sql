-- The refresh callback's function with its audit entry in one body. Migration 26 wrapped migration 19's
-- `registry_refresh_token` in a second PL/pgSQL function: each callback paid an extra function call, its result set
-- written to a tuplestore and read back through `SELECT * INTO`. The steps, their order and their locks are migration
-- 19's, unchanged (see there): the installation's row first, then the consent and the stored registration, each read
-- by a statement of its own after the lock is held; then the token's holder elsewhere, the upsert and the feed event.
-- `registry_refresh_token` itself stays, for replicas of the previous version during a rolling upgrade.
CREATE OR REPLACE FUNCTION registry_refresh_token_audited(
    p_project text, p_fid text, p_token text, p_platform text, p_apns_token text, p_apns_environment text,
    p_state text, p_client_time timestamptz, p_created_at timestamptz, p_refreshed_at timestamptz,
    p_max_ahead_seconds float8, p_purpose text, p_created_event text, p_refreshed_event text, p_moved_event text,
    p_event_data text,
    p_audit_at timestamptz, p_audit_action text, p_audit_target text, p_audit_digest bytea, p_audit_subject boolean,
    p_audit_actor text, p_audit_request text, p_audit_keys text[], p_audit_outcomes text[])
RETURNS TABLE (outcome text, previous text, moved_from text, reg registrations)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_ahead   boolean;
    v_granted boolean;
    v_found   boolean;
    v_current registrations;
BEGIN
    SELECT p_client_time > now() + p_max_ahead_seconds * interval '1 second' INTO v_ahead
        FROM installations WHERE project_id = p_project AND fid = p_fid FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_found';
    ELSIF v_ahead THEN
        outcome := 'ahead';
    ELSE
        SELECT granted INTO v_granted FROM consents
            WHERE project_id = p_project AND fid = p_fid AND purpose = p_purpose;
        IF NOT coalesce(v_granted, false) THEN
            outcome := 'consent_off';
        ELSE
            SELECT * INTO v_current FROM registrations WHERE project_id = p_project AND fid = p_fid;
            v_found := FOUND;
            IF v_found THEN
                previous := v_current.token;
            END IF;
            -- RefreshOutcome.accepts(incoming:stored:): a report without a time always replaces; otherwise it must
            -- not be older than the stored one.
            IF v_found AND v_current.client_time IS NOT NULL AND p_client_time IS NOT NULL
                AND p_client_time < v_current.client_time
            THEN
                outcome := 'older';
                reg := v_current;
            ELSE
                DELETE FROM registrations WHERE project_id = p_project AND token = p_token AND fid <> p_fid
                    RETURNING fid INTO moved_from;
                INSERT INTO registrations AS r (project_id, fid, token, platform, apns_token, apns_environment, state,
                    client_time, created_at, refreshed_at)
                VALUES (p_project, p_fid, p_token, p_platform, p_apns_token, p_apns_environment, p_state,
                    p_client_time, p_created_at, p_refreshed_at)
                ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, platform = excluded.platform,
                    apns_token = excluded.apns_token, apns_environment = excluded.apns_environment,
                    state = excluded.state, client_time = excluded.client_time, expired_reported = false,
                    created_at = CASE WHEN r.token = excluded.token THEN r.created_at ELSE excluded.created_at END,
                    refreshed_at = excluded.refreshed_at
                RETURNING * INTO reg;
                INSERT INTO event_outbox (project_id, type, fid, data)
                VALUES (p_project,
                    CASE WHEN moved_from IS NOT NULL THEN p_moved_event
                         WHEN v_found THEN p_refreshed_event ELSE p_created_event END,
                    p_fid, p_event_data);
                outcome := 'written';
            END IF;
        END IF;
    END IF;
    IF p_audit_action IS NOT NULL THEN
        -- An outcome missing from the table leaves the entry's outcome NULL, which the column refuses: the whole
        -- call fails rather than record an entry that says nothing.
        INSERT INTO audit_pending (project_id, at, action, target, target_digest, subject, actor, request_id, outcome)
        VALUES (p_project, p_audit_at, p_audit_action, p_audit_target, p_audit_digest, p_audit_subject, p_audit_actor,
            p_audit_request, p_audit_outcomes[array_position(p_audit_keys, registry_refresh_token_audited.outcome)]);
    END IF;
    RETURN NEXT;
END $$;
