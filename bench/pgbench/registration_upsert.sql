-- The database's ceiling for a token refresh: one single-row upsert of one of 1000 installations' registration,
-- with a new token each time (as the refresh-callback workload sends). (pgbench reads ":name" even inside string
-- literals, hence the split colon.)
INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
  SELECT 'bench-proj', f, f || ':' || 'pg' || txid_current(), 'android', now(), now()
  FROM (SELECT 'f' || lpad((1 + floor(random() * 1000))::int::text, 21, '0') AS f) AS s
  ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, refreshed_at = excluded.refreshed_at;
