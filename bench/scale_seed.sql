-- The scale data, N installations of project scale-proj in app :app_id (psql -v N=… -v app_id=…): random FIDs, an FCM
-- registration each (152-character token), messaging consent with its ledger event (2 % withdrawn), two topics each
-- (region-0..99, lang-0..19), 1 % deleted (their deletion records, done a year ago), a month of change feed. Used by
-- bench/scale.sh and bench/churn.sh; bench/wrk/scale.lua names the same FIDs.
CREATE UNLOGGED TABLE scale_seed AS
  SELECT n, 'c' || lpad(((n::bigint * 48271) % 2147483647)::text, 10, '0') || lpad(n::text, 11, '0') AS fid
  FROM generate_series(1, :N) AS n;
INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
  SELECT 'scale-proj', fid, :'app_id', decode(md5(fid), 'hex'), now() - interval '60 days', now() - (n % 60) * interval '1 day'
  FROM scale_seed WHERE n % 100 <> 0;
INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
  SELECT 'scale-proj', fid, 'messaging', n % 50 <> 1, 'installation', now() - interval '60 days' FROM scale_seed WHERE n % 100 <> 0;
INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, recorded_at)
  SELECT 'scale-proj', fid, 'messaging', n % 50 <> 1, NULL, 'installation', now() - interval '60 days'
  FROM scale_seed WHERE n % 100 <> 0;
INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
  SELECT 'scale-proj', fid, left(fid || ':APA91b' || repeat(fid, 6), 152), 'android', now() - interval '60 days',
    now() - (n % 45) * interval '1 day'
  FROM scale_seed WHERE n % 100 <> 0;
INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
  SELECT 'scale-proj', fid, 'region-' || n % 100, now() FROM scale_seed WHERE n % 100 <> 0
  UNION ALL SELECT 'scale-proj', fid, 'lang-' || n % 20, now() FROM scale_seed WHERE n % 100 <> 0;
INSERT INTO deletions (project_id, fid, fid_hmac, reason, requested_at, deadline, completed_at)
  SELECT 'scale-proj', fid, decode(md5('d' || fid), 'hex'), 'server', now() - interval '400 days',
    now() - interval '220 days', now() - interval '399 days'
  FROM scale_seed WHERE n % 100 = 0;
INSERT INTO events (project_id, type, fid, data, created_at)
  SELECT 'scale-proj', 'registration.refreshed', fid, NULL, now() - (n % 30) * interval '1 day' - (n % 86400) * interval '1 second'
  FROM scale_seed WHERE n % 100 <> 0 ORDER BY 5;
DROP TABLE scale_seed;
VACUUM ANALYZE;
