-- The same row with only an unindexed column changed (a HOT update): what the indexes cost the update above.
\set n random(1, 1000)
UPDATE registrations SET client_time = now() WHERE project_id = 'bench-proj' AND fid = 'f' || lpad(:n::text, 21, '0');
