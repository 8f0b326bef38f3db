-- Service accounts: admin SDKs exchange an RS256 assertion signed with the account's private key (kept only in the
-- credential file the operator was given) for an hour-long access token. Only the public key is stored.
CREATE TABLE service_accounts (
    key_id        text PRIMARY KEY,
    project_id    text NOT NULL REFERENCES projects ON DELETE CASCADE,
    client_email  text NOT NULL UNIQUE,
    public_key    text NOT NULL,
    token_uri     text NOT NULL,
    created_at    timestamptz NOT NULL
);
CREATE INDEX service_accounts_project ON service_accounts (project_id);
