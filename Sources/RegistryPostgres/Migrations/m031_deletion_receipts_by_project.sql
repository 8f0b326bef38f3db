-- A project's deletion receipts are read by project: a receipt by its FID's keyed hash once purged overdue
-- (`GET …/deletions/{fid}`, an installation's export), and the lists by state in id order (`GET …/deletions?state=`).
-- `overdue_deletions` had only its primary key and is never emptied, so every look-up of an FID without a live
-- record read every tenant's purged receipts; the lists walked `deletions` by id across every tenant, or sorted the
-- project's. Each read is now an index range of its own project (an attacker's review: one tenant's calls made the
-- database read every tenant's rows).
CREATE INDEX overdue_deletions_fid ON overdue_deletions (project_id, fid_hmac);
CREATE INDEX overdue_deletions_project ON overdue_deletions (project_id, deletion_id);
CREATE INDEX deletions_project ON deletions (project_id, id);
CREATE INDEX deletions_project_open ON deletions (project_id, id) WHERE completed_at IS NULL;
-- A rotation expires the project's other keys: by project too (a table of every tenant's keys).
CREATE INDEX server_keys_project ON server_keys (project_id);
