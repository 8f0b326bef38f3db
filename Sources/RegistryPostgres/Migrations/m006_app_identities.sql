-- Browsers: the web origins an app's SDK may call from, space-separated; empty means any origin (API keys are public,
-- as Firebase's are). Apps may also be registered under the app ID and API key their Firebase configuration
-- already carries (no column change: app_id and api_key are free text, checked by the service).
ALTER TABLE apps ADD COLUMN web_origins text NOT NULL DEFAULT '';
