-- A deleted FID never comes back. A create checks retired_fids in its statement's snapshot; if a delete of the same
-- FID is in flight, the create's insert waits for it (the row it deletes conflicts), and by then the snapshot is
-- stale. So the create re-checks after its insert with this function: PL/pgSQL runs each query with a fresh
-- snapshot, which sees the committed retirement, and the raise rolls the create back.
CREATE FUNCTION registry_assert_fid_live(p_project text, p_fid_hmac bytea) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM retired_fids WHERE project_id = p_project AND fid_hmac = p_fid_hmac) THEN
        RAISE EXCEPTION 'installation ID retired' USING ERRCODE = 'RG001';
    END IF;
    RETURN true;
END
$$;
