-- The refresh callback's audit entry, appended in the statement of its write (AuditCompanion in the service): one
-- round trip and one commit for both, and the entry commits or rolls back with the write. The entry's outcome is the
-- one `p_audit_outcomes` gives for the outcome the refresh came to (`p_audit_keys` lists those outcomes): the service
-- computes that table from the answers each outcome becomes, so it is written once. Without an action (a caller that
-- is not audited) no entry is appended.
--
-- Measured before this form was chosen (pgbench on the bench cluster, 16 clients, a refresh and its entry a
-- transaction): PostgreSQL CPU 465 and 640 µs a transaction through this function, 518 and 777 µs for the function
-- and an INSERT pipelined in one transaction, 664 and 856 µs for one statement with the INSERT in a CTE.
CREATE FUNCTION registry_refresh_token_audited(
    p_project text, p_fid text, p_token text, p_platform text, p_apns_token text, p_apns_environment text,
    p_state text, p_client_time timestamptz, p_created_at timestamptz, p_refreshed_at timestamptz,
    p_max_ahead_seconds float8, p_purpose text, p_created_event text, p_refreshed_event text, p_moved_event text,
    p_event_data text,
    p_audit_at timestamptz, p_audit_action text, p_audit_target text, p_audit_digest bytea, p_audit_subject boolean,
    p_audit_actor text, p_audit_request text, p_audit_keys text[], p_audit_outcomes text[])
RETURNS TABLE (outcome text, previous text, moved_from text, reg registrations)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v record;
BEGIN
    SELECT * INTO v FROM registry_refresh_token(p_project, p_fid, p_token, p_platform, p_apns_token,
        p_apns_environment, p_state, p_client_time, p_created_at, p_refreshed_at, p_max_ahead_seconds, p_purpose,
        p_created_event, p_refreshed_event, p_moved_event, p_event_data);
    outcome := v.outcome;
    previous := v.previous;
    moved_from := v.moved_from;
    reg := v.reg;
    IF p_audit_action IS NOT NULL THEN
        -- An outcome missing from the table leaves the entry's outcome NULL, which the column refuses: the whole
        -- call fails rather than record an entry that says nothing.
        INSERT INTO audit_pending (project_id, at, action, target, target_digest, subject, actor, request_id, outcome)
        VALUES (p_project, p_audit_at, p_audit_action, p_audit_target, p_audit_digest, p_audit_subject, p_audit_actor,
            p_audit_request, p_audit_outcomes[array_position(p_audit_keys, v.outcome)]);
    END IF;
    RETURN NEXT;
END $$;

-- Migration 25 declared the canonical bytes IMMUTABLE, but `concat` and `extract` on a timestamptz are STABLE, and
-- PostgreSQL inlines a SQL function only when its body is no more volatile than it says: it ran as a call of its own
-- for every entry (pg_stat_statements listed its SELECT). STABLE is what it is; the bytes are the same.
ALTER FUNCTION registry_audit_canonical(text, bigint, timestamptz, text, bytea, boolean, text, text, text) STABLE;
