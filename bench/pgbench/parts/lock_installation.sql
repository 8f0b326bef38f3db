-- The refresh's first step alone: the installation's row lock (SELECT … FOR UPDATE), which serialises it with consent
-- changes and deletions.
\set n random(1, 1000)
SELECT 1 FROM installations WHERE project_id = 'bench-proj' AND fid = 'f' || lpad(:n::text, 21, '0') FOR UPDATE;
