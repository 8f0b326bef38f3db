-- The registration's row rewritten with a new token and time, as a refresh does (not HOT: the token and the time are
-- in indexes).
\set n random(1, 1000)
UPDATE registrations SET token = 'f' || lpad(:n::text, 21, '0') || ':' || 'pg' || txid_current(), refreshed_at = now()
WHERE project_id = 'bench-proj' AND fid = 'f' || lpad(:n::text, 21, '0');
