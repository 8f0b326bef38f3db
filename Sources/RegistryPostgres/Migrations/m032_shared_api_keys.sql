-- Firebase gives a project one API key per platform, and every app of that platform ships it: a google-services.json
-- with `com.example` and `com.example.debug` names the same key twice. Migration 1 made `apps.api_key` unique, so
-- the second app could not be registered under its Firebase configuration's key. A key now belongs to one project
-- (`api_keys`), and any number of that project's apps may hold it. An older binary's `app create` fails against the
-- new foreign key during a rolling upgrade (apps are created with the CLI of the new release).
CREATE TABLE api_keys (
    api_key    text PRIMARY KEY,
    project_id text NOT NULL REFERENCES projects ON DELETE CASCADE,
    UNIQUE (project_id, api_key)
);
INSERT INTO api_keys (api_key, project_id) SELECT api_key, project_id FROM apps;
ALTER TABLE apps DROP CONSTRAINT apps_api_key_key;
CREATE INDEX apps_api_key ON apps (api_key);
-- The backstop of the rule: an app's key is its own project's.
ALTER TABLE apps ADD CONSTRAINT apps_api_key_project
    FOREIGN KEY (project_id, api_key) REFERENCES api_keys (project_id, api_key) ON DELETE CASCADE;
