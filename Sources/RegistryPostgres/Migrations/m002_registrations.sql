-- Push registrations: one current token per installation. A refresh that brings a new token supersedes the old
-- one in place, so the installation's topic subscriptions (keyed by FID) carry over.
CREATE TABLE registrations (
    project_id       text NOT NULL,
    fid              text NOT NULL,
    token            text NOT NULL,
    platform         text NOT NULL CHECK (platform IN ('ios', 'android', 'web')),
    apns_token       text,
    apns_environment text CHECK (apns_environment IN ('SANDBOX', 'PROD')),
    bundle_id        text,
    app_version      text,
    sdk_version      text,
    web_endpoint     text,
    web_auth         text,
    web_p256dh       text,
    web_app_key      text,
    web_origin       text,
    -- 'disabled' when messaging consent was withdrawn; only a new registration makes it active again.
    state            text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    -- When the client received the token (callbacks): an older callback never replaces a newer token.
    client_time      timestamptz,
    created_at       timestamptz NOT NULL,
    refreshed_at     timestamptz NOT NULL,
    PRIMARY KEY (project_id, fid),
    UNIQUE (project_id, token),
    FOREIGN KEY (project_id, fid) REFERENCES installations ON DELETE CASCADE
);
CREATE INDEX registrations_refreshed ON registrations (refreshed_at);
CREATE INDEX registrations_apns ON registrations (project_id, apns_token) WHERE apns_token IS NOT NULL;

CREATE TABLE topic_subscriptions (
    project_id text NOT NULL,
    fid        text NOT NULL,
    topic      text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (project_id, fid, topic),
    FOREIGN KEY (project_id, fid) REFERENCES installations ON DELETE CASCADE
);
-- Who a topic reaches, in FID order for keyset paging.
CREATE INDEX topic_subscriptions_topic ON topic_subscriptions (project_id, topic, fid);
