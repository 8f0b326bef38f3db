-- Less work a write, less a stream page (docs/benchmarks.md, "Performance and scale").

-- Who a topic or condition reaches joins each registration with its messaging consent. This index covers that join
-- (index-only on settled pages): without it every target costs a random read of the consent's heap row, 20 % of a
-- page of 10,000 on a 1,000,000-member topic. The queries name the purpose and the flag as constants, so the planner
-- can use it (a bound parameter could not prove the index's predicate). It costs consent writes one more index entry
-- when they grant.
CREATE INDEX consents_messaging_granted ON consents (project_id, fid) WHERE purpose = 'messaging' AND granted;

-- Nothing reads this index: the expiry job reads registrations_unreported_expiry, the counts scan, the targeting
-- queries go by FID. Every refresh maintained it (refreshed_at changes on each one).
DROP INDEX registrations_refreshed;

-- The revive trigger did its work only for a retired registration or one that is quarantined: for every other update
-- it ran PL/pgSQL (two whole rows unpacked) to change nothing. Now it fires only then, with the same function.
DROP TRIGGER registrations_feedback_revive ON registrations;
CREATE TRIGGER registrations_feedback_revive BEFORE UPDATE ON registrations
    FOR EACH ROW
    WHEN (OLD.state = 'retired' OR NEW.quarantined_at IS NOT NULL OR NEW.quarantine_reason IS NOT NULL
          OR NEW.quarantine_channel IS NOT NULL OR NEW.quarantined_by_breaker)
    EXECUTE FUNCTION registry_feedback_revive();
