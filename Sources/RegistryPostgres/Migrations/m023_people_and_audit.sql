-- People: installations bound to the app's own user IDs, their history, erasures by person; and the audit log.

-- An installation's user: at most one. It leaves with the installation.
CREATE TABLE user_bindings (
    project_id text NOT NULL,
    fid        text NOT NULL,
    user_id    text NOT NULL,
    -- The user ID's keyed hash (FIDHasher over "user:" + ID): what erasures and audit entries know it by.
    user_hmac  bytea NOT NULL,
    bound_at   timestamptz NOT NULL,
    PRIMARY KEY (project_id, fid),
    FOREIGN KEY (project_id, fid) REFERENCES installations (project_id, fid) ON DELETE CASCADE
);
CREATE INDEX user_bindings_user ON user_bindings (project_id, user_id);
CREATE INDEX user_bindings_user_hmac ON user_bindings (project_id, user_hmac);

-- Every bind, move and unbind of an installation. The clear user IDs are cleared when that user is erased; the
-- keyed hashes stay. The history of an installation leaves with it.
CREATE TABLE user_binding_history (
    seq                bigserial PRIMARY KEY,
    project_id         text NOT NULL,
    fid                text NOT NULL,
    action             text NOT NULL CHECK (action IN ('bound', 'moved', 'unbound', 'displaced')),
    user_id            text,
    user_hmac          bytea NOT NULL,
    previous_user_id   text,
    previous_user_hmac bytea,
    at                 timestamptz NOT NULL,
    FOREIGN KEY (project_id, fid) REFERENCES installations (project_id, fid) ON DELETE CASCADE
);
CREATE INDEX user_binding_history_fid ON user_binding_history (project_id, fid, seq);
CREATE INDEX user_binding_history_user ON user_binding_history (project_id, user_hmac);
CREATE INDEX user_binding_history_previous ON user_binding_history (project_id, previous_user_hmac)
    WHERE previous_user_hmac IS NOT NULL;

-- A deletion may be part of a person's erasure.
ALTER TABLE deletions DROP CONSTRAINT deletions_reason_check;
ALTER TABLE deletions ADD CONSTRAINT deletions_reason_check
    CHECK (reason IN ('client', 'server', 'inactivity', 'erasure'));

-- The chainer asks whether an entry's installation is still held (its deletion record kept) by keyed hash.
CREATE INDEX deletions_fid_hmac ON deletions (project_id, fid_hmac);

-- A person's erasure: known by the user ID's keyed hash only.
CREATE TABLE erasures (
    project_id   text NOT NULL REFERENCES projects ON DELETE CASCADE,
    erasure_id   text NOT NULL,
    user_hmac    bytea NOT NULL,
    requested_at timestamptz NOT NULL,
    deadline     timestamptz NOT NULL,
    -- When the audit log's clear mentions of the user were cleared (once every deletion of the erasure was purged).
    scrubbed_at  timestamptz,
    PRIMARY KEY (project_id, erasure_id)
);
CREATE INDEX erasures_user ON erasures (project_id, user_hmac);
CREATE INDEX erasures_unscrubbed ON erasures (requested_at) WHERE scrubbed_at IS NULL;

-- The installations an erasure deleted, by keyed hash and deletion record. When the purge removes a deletion record,
-- its outcome is copied here, so the person's receipt outlives the records it was made of.
CREATE TABLE erasure_members (
    project_id   text NOT NULL,
    erasure_id   text NOT NULL,
    deletion_id  bigint NOT NULL,
    fid_hmac     bytea NOT NULL,
    purged_state text CHECK (purged_state IN ('done', 'overdue')),
    completed_at timestamptz,
    services     text,
    PRIMARY KEY (project_id, erasure_id, deletion_id),
    FOREIGN KEY (project_id, erasure_id) REFERENCES erasures ON DELETE CASCADE
);
CREATE INDEX erasure_members_deletion ON erasure_members (deletion_id);

-- The audit log. Requests append entries unchained (`audit_pending`, no lock: the refresh callback writes one too);
-- the chainer (`registry_audit_chain`) moves them, in arrival order, into `audit_log`, numbering each within its
-- project and hashing it with the previous one's hash. Verification (`token-registry audit verify`) recomputes the
-- chain from its anchor: the head of the segment purged last (zeros when none was).
CREATE TABLE audit_pending (
    id            bigserial PRIMARY KEY,
    project_id    text NOT NULL,
    at            timestamptz NOT NULL,
    action        text NOT NULL,
    target        text,
    -- What the chain covers of the target: the keyed hash of the installation or user it names (so its clear text can
    -- be cleared once the subject is purged, and the chain still verifies), or the SHA-256 of any other target.
    target_digest bytea NOT NULL,
    subject       boolean NOT NULL,
    actor         text NOT NULL,
    request_id    text NOT NULL,
    outcome       text NOT NULL
);
CREATE INDEX audit_pending_project ON audit_pending (project_id, id);

CREATE TABLE audit_log (
    project_id    text NOT NULL,
    seq           bigint NOT NULL,
    at            timestamptz NOT NULL,
    action        text NOT NULL,
    target        text,
    target_digest bytea NOT NULL,
    subject       boolean NOT NULL,
    actor         text NOT NULL,
    request_id    text NOT NULL,
    outcome       text NOT NULL,
    previous_hash bytea NOT NULL,
    hash          bytea NOT NULL,
    PRIMARY KEY (project_id, seq)
);
CREATE INDEX audit_log_subject ON audit_log (project_id, target_digest) WHERE subject AND target IS NOT NULL;

CREATE TABLE audit_chains (
    project_id  text PRIMARY KEY,
    head_seq    bigint NOT NULL,
    head_hash   bytea NOT NULL,
    anchor_seq  bigint NOT NULL,
    anchor_hash bytea NOT NULL
);

-- An entry is never edited; only its clear target may be cleared (its subject was purged).
CREATE FUNCTION registry_audit_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.target IS NULL AND (NEW.project_id, NEW.seq, NEW.at, NEW.action, NEW.target_digest, NEW.subject, NEW.actor,
        NEW.request_id, NEW.outcome, NEW.previous_hash, NEW.hash) IS NOT DISTINCT FROM (OLD.project_id, OLD.seq,
        OLD.at, OLD.action, OLD.target_digest, OLD.subject, OLD.actor, OLD.request_id, OLD.outcome, OLD.previous_hash,
        OLD.hash) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit log entries are append-only' USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION registry_audit_immutable();

-- Entries leave only through the retention purge, which says so for its transaction (and chains an entry that it
-- ran); the chains' numbers only grow. This stops mistakes and casual edits, not a superuser, who can turn triggers
-- off: against that the jobs log every new head, so a rewritten chain disagrees with heads recorded elsewhere
-- (`token-registry audit verify --head`).
CREATE FUNCTION registry_audit_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'audit_log' AND current_setting('registry.audit_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    IF TG_TABLE_NAME = 'audit_chains' AND TG_OP = 'UPDATE' AND NEW.project_id = OLD.project_id
        AND NEW.head_seq >= OLD.head_seq AND NEW.anchor_seq >= OLD.anchor_seq THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only (% on %)', TG_OP, TG_TABLE_NAME USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION registry_audit_guard();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION registry_audit_guard();
CREATE TRIGGER audit_chains_forward BEFORE UPDATE OR DELETE ON audit_chains
    FOR EACH ROW EXECUTE FUNCTION registry_audit_guard();
CREATE TRIGGER audit_chains_no_truncate BEFORE TRUNCATE ON audit_chains
    FOR EACH STATEMENT EXECUTE FUNCTION registry_audit_guard();

-- The bytes an entry's hash covers after the previous hash: each field as "<octets>:<text>", in a fixed order, so no
-- two entries share them. `AuditChain.canonical` in Swift writes the same.
CREATE FUNCTION registry_audit_canonical(
    p_project text, p_seq bigint, p_at timestamptz, p_action text, p_digest bytea, p_subject boolean, p_actor text,
    p_request text, p_outcome text
) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to(string_agg(octet_length(f)::text || ':' || f, '' ORDER BY n), 'UTF8')
    FROM unnest(ARRAY[p_project, p_seq::text, ((extract(epoch FROM p_at) * 1000000)::bigint)::text, p_action,
        encode(p_digest, 'hex'), CASE WHEN p_subject THEN 's' ELSE 'r' END, p_actor, p_request, p_outcome])
        WITH ORDINALITY AS t(f, n)
$$;

-- Chains up to `p_limit` pending entries, in arrival order within each project and at most `p_share` of one project
-- a call (so no project's backlog takes every call); answers how many. The caller calls again while the answer is
-- `p_limit` (each call is its own short transaction). One chainer at a time: the others answer 0 at once. Its lock
-- has a class of its own (users' locks are class 7627861).
CREATE FUNCTION registry_audit_chain(p_limit int, p_share int)
    RETURNS TABLE (chained_project text, chained int, new_head_seq bigint, new_head_hash bytea)
    LANGUAGE plpgsql AS $$
DECLARE
    v_project text;
    v_seq bigint;
    v_hash bytea;
    v_previous bytea;
    v_target text;
    v_done int := 0;
    v_here int;
    r record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7627862, 1) THEN
        RETURN;
    END IF;
    FOR v_project IN SELECT DISTINCT project_id FROM audit_pending LOOP
        EXIT WHEN v_done >= p_limit;
        INSERT INTO audit_chains (project_id, head_seq, head_hash, anchor_seq, anchor_hash)
        VALUES (v_project, 0, decode(repeat('00', 32), 'hex'), 0, decode(repeat('00', 32), 'hex'))
        ON CONFLICT DO NOTHING;
        SELECT head_seq, head_hash INTO v_seq, v_hash FROM audit_chains WHERE project_id = v_project FOR UPDATE;
        v_here := 0;
        FOR r IN SELECT * FROM audit_pending WHERE project_id = v_project ORDER BY id
            LIMIT least(p_limit - v_done, p_share) LOOP
            -- An entry about a subject already purged (a person whose erasure was scrubbed, an installation whose
            -- deletion record is gone) keeps its keyed hash only, as the purge would have left it.
            v_target := r.target;
            IF r.subject AND (
                EXISTS (SELECT 1 FROM erasures e WHERE e.project_id = r.project_id AND e.user_hmac = r.target_digest
                    AND e.scrubbed_at IS NOT NULL)
                OR (EXISTS (SELECT 1 FROM retired_fids f WHERE f.project_id = r.project_id
                        AND f.fid_hmac = r.target_digest)
                    AND NOT EXISTS (SELECT 1 FROM deletions d WHERE d.project_id = r.project_id
                        AND d.fid_hmac = r.target_digest))) THEN
                v_target := NULL;
            END IF;
            v_seq := v_seq + 1;
            v_previous := v_hash;
            v_hash := sha256(v_previous || registry_audit_canonical(r.project_id, v_seq, r.at, r.action,
                r.target_digest, r.subject, r.actor, r.request_id, r.outcome));
            INSERT INTO audit_log (project_id, seq, at, action, target, target_digest, subject, actor, request_id,
                outcome, previous_hash, hash)
            VALUES (r.project_id, v_seq, r.at, r.action, v_target, r.target_digest, r.subject, r.actor, r.request_id,
                r.outcome, v_previous, v_hash);
            DELETE FROM audit_pending WHERE id = r.id;
            v_here := v_here + 1;
        END LOOP;
        UPDATE audit_chains SET head_seq = v_seq, head_hash = v_hash WHERE project_id = v_project;
        v_done := v_done + v_here;
        chained_project := v_project;
        chained := v_here;
        new_head_seq := v_seq;
        new_head_hash := v_hash;
        RETURN NEXT;
    END LOOP;
END $$;
