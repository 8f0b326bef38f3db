-- Less work a write, less a stream page (docs/benchmarks.md, "Performance and scale").

-- Who a topic or condition reaches joins each registration with its messaging consent. This index covers that join
-- (index-only on settled pages): without it every target costs a random read of the consent's heap row, 20 % of a
-- page of 10,000 on a 1,000,000-member topic. The queries name the purpose and the flag as constants, so the planner
-- can use it (a bound parameter could not prove the index's predicate). It costs consent writes one more index entry
-- when they grant.
CREATE INDEX consents_messaging_granted ON consents (project_id, fid) WHERE purpose = 'messaging' AND granted;

-- Nothing reads this index: the expiry job reads registrations_unreported_expiry, the counts scan, the targeting
-- queries go by FID. Every refresh maintained it (refreshed_at changes on each one).
DROP INDEX registrations_refreshed;

-- The revive trigger did its work only for a retired registration or one that is quarantined: for every other update
-- it ran PL/pgSQL (two whole rows unpacked) to change nothing. Now it fires only then, with the same function.
DROP TRIGGER registrations_feedback_revive ON registrations;
CREATE TRIGGER registrations_feedback_revive BEFORE UPDATE ON registrations
    FOR EACH ROW
    WHEN (OLD.state = 'retired' OR NEW.quarantined_at IS NOT NULL OR NEW.quarantine_reason IS NOT NULL
          OR NEW.quarantine_channel IS NOT NULL OR NEW.quarantined_by_breaker)
    EXECUTE FUNCTION registry_feedback_revive();

-- The audit chainer cost PostgreSQL about 150 µs an entry, about as much as the refresh the entry records
-- (bench/scale.sh's pg_stat_statements): per entry a query for its canonical bytes (`unnest`, `string_agg`, a sort), an
-- INSERT, a DELETE and three look-ups, each a statement of its own. Now the canonical bytes are one expression (inlined
-- where it is used; `concat` skips a NULL field as `string_agg` did, so the bytes are the same), the purged-subject
-- test is part of the one query that reads the batch, and the batch is written with one INSERT and removed with one
-- DELETE. Same lock, same order, same hashes, same answers.
CREATE OR REPLACE FUNCTION registry_audit_canonical(
    p_project text, p_seq bigint, p_at timestamptz, p_action text, p_digest bytea, p_subject boolean, p_actor text,
    p_request text, p_outcome text
) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to(concat(
        octet_length(p_project)::text || ':' || p_project,
        octet_length(p_seq::text)::text || ':' || p_seq::text,
        octet_length(((extract(epoch FROM p_at) * 1000000)::bigint)::text)::text || ':'
            || ((extract(epoch FROM p_at) * 1000000)::bigint)::text,
        octet_length(p_action)::text || ':' || p_action,
        octet_length(encode(p_digest, 'hex'))::text || ':' || encode(p_digest, 'hex'),
        '1:' || CASE WHEN p_subject THEN 's' ELSE 'r' END,
        octet_length(p_actor)::text || ':' || p_actor,
        octet_length(p_request)::text || ':' || p_request,
        octet_length(p_outcome)::text || ':' || p_outcome), 'UTF8')
$$;

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
    -- The projects with pending entries, one index probe each (audit_pending_project), not a scan of the queue.
    FOR v_project IN
        WITH RECURSIVE p AS (
            (SELECT project_id FROM audit_pending ORDER BY project_id LIMIT 1)
            UNION ALL
            SELECT (SELECT a.project_id FROM audit_pending a WHERE a.project_id > p.project_id
                    ORDER BY a.project_id LIMIT 1)
            FROM p WHERE p.project_id IS NOT NULL)
        SELECT project_id FROM p WHERE project_id IS NOT NULL
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
