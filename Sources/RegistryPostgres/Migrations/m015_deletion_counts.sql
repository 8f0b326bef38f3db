-- Completed deletions, counted as they complete and as they are purged, so that the /metrics gauge reads a counter
-- instead of counting up to 30 days of completions every round (over 1,000,000 deletions that round took 77-96 ms,
-- every 5 s on every scraped replica).
--
-- Writers only append to deletion_count_changes (+1 as a deletion completes, -n as the purge drops completed ones):
-- appends never wait on one another, where one shared counter row would queue every deletion's transaction behind
-- the last one's commit, and could deadlock with the rows they lock. The purge (every jobs run, in the service or in
-- `jobs run`), one at a time under its advisory lock, folds the changes into deletion_counts; the gauge adds what is
-- not folded yet.
CREATE TABLE deletion_counts (
    done bigint NOT NULL
);
INSERT INTO deletion_counts (done) SELECT count(*) FROM deletions WHERE completed_at IS NOT NULL;

CREATE TABLE deletion_count_changes (
    done bigint NOT NULL
);

CREATE FUNCTION deletion_completed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deletion_count_changes (done) VALUES (CASE WHEN NEW.completed_at IS NULL THEN -1 ELSE 1 END);
    RETURN NULL;
END
$$;

CREATE FUNCTION deletions_purged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deletion_count_changes (done)
    SELECT -count(*) FROM purged WHERE completed_at IS NOT NULL HAVING count(*) > 0;
    RETURN NULL;
END
$$;

-- The first two fire only when a row enters or leaves the completed state.
CREATE TRIGGER deletions_completed_inserted AFTER INSERT ON deletions
    FOR EACH ROW WHEN (NEW.completed_at IS NOT NULL) EXECUTE FUNCTION deletion_completed();
CREATE TRIGGER deletions_completed_changed AFTER UPDATE OF completed_at ON deletions
    FOR EACH ROW WHEN ((OLD.completed_at IS NULL) <> (NEW.completed_at IS NULL)) EXECUTE FUNCTION deletion_completed();
CREATE TRIGGER deletions_purged AFTER DELETE ON deletions
    REFERENCING OLD TABLE AS purged FOR EACH STATEMENT EXECUTE FUNCTION deletions_purged();
