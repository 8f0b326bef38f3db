-- Projects, apps and the keys that prove who is calling.
CREATE TABLE projects (
    project_id     text PRIMARY KEY,
    project_number bigint NOT NULL UNIQUE,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- Server keys are stored only as SHA-256 of the key.
CREATE TABLE server_keys (
    key_hash   bytea PRIMARY KEY,
    project_id text NOT NULL REFERENCES projects ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE apps (
    app_id            text PRIMARY KEY,
    project_id        text NOT NULL REFERENCES projects ON DELETE CASCADE,
    platform          text NOT NULL CHECK (platform IN ('ios', 'android', 'web')),
    bundle_id         text,
    -- API keys identify an app publicly (Firebase ships them inside apps); they are not secrets.
    api_key           text NOT NULL UNIQUE,
    auto_init_default boolean NOT NULL DEFAULT true,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX apps_project ON apps (project_id);

-- ES256 keys that sign installation auth tokens; the newest signs, all verify until retired.
CREATE TABLE signing_keys (
    kid         text PRIMARY KEY,
    private_pem text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Secrets the service makes for itself (the FID-hash key), created once by the first replica.
CREATE TABLE server_secrets (
    name   text PRIMARY KEY,
    secret bytea NOT NULL
);

CREATE TABLE installations (
    project_id         text NOT NULL REFERENCES projects ON DELETE CASCADE,
    fid                text NOT NULL,
    app_id             text NOT NULL REFERENCES apps ON DELETE CASCADE,
    refresh_token_hash bytea NOT NULL,
    sdk_version        text,
    created_at         timestamptz NOT NULL,
    last_seen_at       timestamptz NOT NULL,
    PRIMARY KEY (project_id, fid)
);
CREATE INDEX installations_last_seen ON installations (last_seen_at);

-- FIDs that were deleted, kept only as HMAC(server secret, project || fid), so none is handed out again.
CREATE TABLE retired_fids (
    project_id text NOT NULL,
    fid_hmac   bytea NOT NULL,
    retired_at timestamptz NOT NULL,
    PRIMARY KEY (project_id, fid_hmac)
);

-- Current consent per purpose; messaging consent ("autoInitEnabled") gates push registrations.
CREATE TABLE consents (
    project_id     text NOT NULL,
    fid            text NOT NULL,
    purpose        text NOT NULL,
    granted        boolean NOT NULL,
    policy_version text,
    source         text,
    actor          text NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (project_id, fid, purpose),
    FOREIGN KEY (project_id, fid) REFERENCES installations ON DELETE CASCADE
);

-- The consent ledger: append-only. Rows are never updated; they leave only with their installation's purge.
CREATE TABLE consent_events (
    seq            bigserial PRIMARY KEY,
    project_id     text NOT NULL,
    fid            text NOT NULL,
    purpose        text NOT NULL,
    granted        boolean NOT NULL,
    previous       boolean,
    actor          text NOT NULL CHECK (actor IN ('installation', 'server', 'default')),
    source         text,
    policy_version text,
    recorded_at    timestamptz NOT NULL
);
CREATE INDEX consent_events_subject ON consent_events (project_id, fid, seq);

CREATE FUNCTION consent_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'consent_events is append-only' USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER consent_events_no_update BEFORE UPDATE ON consent_events
    FOR EACH ROW EXECUTE FUNCTION consent_events_immutable();
