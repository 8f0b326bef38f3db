-- Device check-ins of the register API (iOS default token path, GCM clients): the AidLogin identity, stored as a
-- hash of its security token, bound to the installation it registers for. A deletion of that installation unbinds
-- it (the FID leaves this table with the installation).
CREATE TABLE checkins (
    android_id           bigint PRIMARY KEY,
    security_token_hash  bytea NOT NULL,
    project_id           text,
    fid                  text,
    created_at           timestamptz NOT NULL,
    last_checkin_at      timestamptz NOT NULL,
    FOREIGN KEY (project_id, fid) REFERENCES installations ON DELETE SET NULL (project_id, fid)
);
CREATE INDEX checkins_installation ON checkins (project_id, fid) WHERE fid IS NOT NULL;

-- GCM-form registrations (no installation: a web-push receiver such as firebase-messaging's), one token per
-- check-in, app and subtype.
CREATE TABLE gcm_registrations (
    android_id  bigint NOT NULL REFERENCES checkins ON DELETE CASCADE,
    app         text NOT NULL,
    subtype     text NOT NULL,
    token       text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (android_id, app, subtype)
);
