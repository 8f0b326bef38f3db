-- The subjects whose clear text must leave the audit log (an installation's FID at its deletion record's purge, a
-- person's ID once their erasure has no record left), cleared a bounded number of entries at a time. The purge used
-- to clear every entry of a subject in its own statement: a tenant can write any number of audit entries naming one
-- of its installations or users (every audited call is recorded, refused ones too), and a few million of them made
-- that statement outlast its time-out; the purge then rolled back and met the same subject first every round, and no
-- tenant's deletion records were purged again.
CREATE TABLE audit_scrubs (
    project_id text NOT NULL,
    digest     bytea NOT NULL,
    -- When the subject next gets its turn: a subject with more entries than a turn clears goes to the back.
    next_at    timestamptz NOT NULL,
    PRIMARY KEY (project_id, digest)
);
CREATE INDEX audit_scrubs_next ON audit_scrubs (next_at);
