-- A page of targets (a topic's, a condition's) reads, for each subscriber, the registration's token, platform, state,
-- refresh time and quarantine. The primary key found the row, but every row was then a random read of the heap: on a
-- 1,000,000-member topic, 980,000 buffer look-ups, prunes and visibility checks, 60 % of PostgreSQL's time a page
-- (docs/benchmarks.md, session 17). The primary key now carries those columns, so a page is an index-only scan on
-- pages the visibility map marks all-visible (a registration written since the last vacuum is still read from the
-- heap).
--
-- The key stays (project_id, fid): look-ups and ON CONFLICT (project_id, fid) are as before (no table references
-- registrations by a foreign key, so the constraint can be swapped in place). No other index is added: a refresh
-- changes refreshed_at, which registrations_unreported_expiry indexes, so no refresh was a HOT update, and each already
-- wrote a primary-key entry; the entry is now wider (a token is at most 2048 bytes: the widest entry is about 2,200 of
-- the 2,704 a B-tree entry can hold, IndexedInputLimitTests).
--
-- Built inside the migration's transaction, not CONCURRENTLY: writes to registrations wait for the build, 4.6 s for
-- 1,100,000 rows on this machine (docs/operations.md, "Migrations on a live database").
CREATE UNIQUE INDEX registrations_pkey_covering ON registrations (project_id, fid)
    INCLUDE (state, refreshed_at, platform, quarantined_at, token);
ALTER TABLE registrations DROP CONSTRAINT registrations_pkey,
    ADD CONSTRAINT registrations_pkey PRIMARY KEY USING INDEX registrations_pkey_covering;
