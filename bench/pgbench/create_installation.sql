-- The SQL of one installation create, exactly as the service sends it: one statement doing the retired-FID
-- check, the installation row, its initial consent, the ledger entry and the change-feed event (an implicit transaction).
-- FIDs are random, as the SDKs' and the service's are, so every insert lands at a random place in each FID index
-- (sequential FIDs, 'pg' || txid as this script had before, only ever append to the right edge of those indexes and
-- measured 13-16 % more transactions a second than random ones on the same database).
\set r random(1, 2000000000)
WITH retired AS (
    SELECT 1 FROM retired_fids WHERE project_id = 'bench-proj' AND fid_hmac = decode(md5(:r::text), 'hex')
), created AS (
    INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, sdk_version, created_at, last_seen_at)
    SELECT 'bench-proj', 'c' || left(md5(:r::text || '.' || txid_current()), 21), :app_id, decode(md5(:r::text), 'hex'), 'w:0.6.24', now(), now()
    WHERE NOT EXISTS (SELECT 1 FROM retired)
    ON CONFLICT DO NOTHING
    RETURNING project_id, fid, created_at
), consent AS (
    INSERT INTO consents (project_id, fid, purpose, granted, source, actor, updated_at)
    SELECT project_id, fid, 'messaging', true, 'app-default', 'default', created_at FROM created
), ledger AS (
    INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, recorded_at)
    SELECT project_id, fid, 'messaging', true, NULL, 'default', 'app-default', created_at FROM created
), event AS (
    INSERT INTO event_outbox (project_id, type, fid) SELECT project_id, 'installation.created', fid FROM created
)
SELECT count(*) AS created FROM created;
