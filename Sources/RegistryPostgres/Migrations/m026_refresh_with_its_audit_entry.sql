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

-- The chainer of migration 25, its projects taken oldest pending entry first (below); the rest is unchanged.
CREATE OR REPLACE FUNCTION registry_audit_chain(p_limit int, p_share int)
    RETURNS TABLE (chained_project text, chained int, new_head_seq bigint, new_head_hash bytea)
    LANGUAGE plpgsql AS $$
DECLARE
    v_project text;
    v_seq bigint;
    v_hash bytea;
    v_previous bytea;
    v_done int := 0;
    v_ids bigint[];
    v_seqs bigint[];
    v_targets text[];
    v_previouses bytea[];
    v_hashes bytea[];
    r record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7627862, 1) THEN
        RETURN;
    END IF;
    -- The projects with pending entries, one index probe each (audit_pending_project), not a scan of the queue;
    -- the one whose oldest entry has waited longest first, so that projects that keep a full share pending (a
    -- call takes 4 of them) cannot hold another's entries back for good, as they did in project_id order.
    FOR v_project IN
        WITH RECURSIVE p AS (
            (SELECT project_id FROM audit_pending ORDER BY project_id LIMIT 1)
            UNION ALL
            SELECT (SELECT a.project_id FROM audit_pending a WHERE a.project_id > p.project_id
                    ORDER BY a.project_id LIMIT 1)
            FROM p WHERE p.project_id IS NOT NULL)
        SELECT project_id FROM p WHERE project_id IS NOT NULL
        ORDER BY (SELECT min(a.id) FROM audit_pending a WHERE a.project_id = p.project_id)
    LOOP
        EXIT WHEN v_done >= p_limit;
        INSERT INTO audit_chains (project_id, head_seq, head_hash, anchor_seq, anchor_hash)
        VALUES (v_project, 0, decode(repeat('00', 32), 'hex'), 0, decode(repeat('00', 32), 'hex'))
        ON CONFLICT DO NOTHING;
        SELECT head_seq, head_hash INTO v_seq, v_hash FROM audit_chains WHERE project_id = v_project FOR UPDATE;
        v_ids := '{}';
        v_seqs := '{}';
        v_targets := '{}';
        v_previouses := '{}';
        v_hashes := '{}';
        FOR r IN
            -- An entry about a subject already purged (a person whose erasure was scrubbed, an installation whose
            -- deletion record is gone) keeps its keyed hash only, as the purge would have left it.
            SELECT p.*, p.subject AND (
                    EXISTS (SELECT 1 FROM erasures e WHERE e.project_id = p.project_id
                        AND e.user_hmac = p.target_digest AND e.scrubbed_at IS NOT NULL)
                    OR (EXISTS (SELECT 1 FROM retired_fids f WHERE f.project_id = p.project_id
                            AND f.fid_hmac = p.target_digest)
                        AND NOT EXISTS (SELECT 1 FROM deletions d WHERE d.project_id = p.project_id
                            AND d.fid_hmac = p.target_digest))) AS purged
            FROM audit_pending p WHERE p.project_id = v_project ORDER BY p.id
            LIMIT least(p_limit - v_done, p_share)
        LOOP
            v_seq := v_seq + 1;
            v_previous := v_hash;
            v_hash := sha256(v_previous || registry_audit_canonical(r.project_id, v_seq, r.at, r.action,
                r.target_digest, r.subject, r.actor, r.request_id, r.outcome));
            v_ids := v_ids || r.id;
            v_seqs := v_seqs || v_seq;
            v_targets := v_targets || CASE WHEN r.purged THEN NULL ELSE r.target END;
            v_previouses := v_previouses || v_previous;
            v_hashes := v_hashes || v_hash;
        END LOOP;
        INSERT INTO audit_log (project_id, seq, at, action, target, target_digest, subject, actor, request_id,
            outcome, previous_hash, hash)
        SELECT p.project_id, c.seq, p.at, p.action, c.target, p.target_digest, p.subject, p.actor, p.request_id,
            p.outcome, c.previous, c.hash
        FROM unnest(v_ids, v_seqs, v_targets, v_previouses, v_hashes) AS c(id, seq, target, previous, hash)
        JOIN audit_pending p ON p.id = c.id
        ORDER BY c.seq;
        DELETE FROM audit_pending WHERE id = ANY(v_ids);
        UPDATE audit_chains SET head_seq = v_seq, head_hash = v_hash WHERE project_id = v_project;
        v_done := v_done + cardinality(v_ids);
        chained_project := v_project;
        chained := cardinality(v_ids);
        new_head_seq := v_seq;
        new_head_hash := v_hash;
        RETURN NEXT;
    END LOOP;
END $$;
