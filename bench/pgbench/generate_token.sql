-- The SQL of one auth-token mint: look up the installation by its key (signing happens in the service).
SELECT * FROM installations WHERE project_id = 'bench-proj' AND fid = :fid;
