-- A subject export reads an installation's change-feed events a page at a time, in feed order (`seq > cursor ORDER
-- BY seq LIMIT n`): with `events_fid` on (project_id, fid) alone, each page read and sorted every event of the
-- installation, so an installation with a million events (a client re-sending its consent in a loop makes one an
-- event) cost a million rows a page. The same columns with `seq` serve both that and every look-up by FID, so the
-- old index goes. The build holds the relay's inserts into `events` (not the writes, which go to the outbox) for its
-- duration: 2.8 s a million events on the project's machine (docs/operations.md, "Migrations on a live database").
CREATE INDEX events_fid_seq ON events (project_id, fid, seq);
DROP INDEX events_fid;
