-- A linked service's delivery counters (the /metrics series registry_delivery_attempts_total and _failures_total)
-- leave with the service: a project that added and removed services in a loop left a row, and two series, for every
-- name it ever used. The rows of services removed before this migration go now; the service store deletes the row
-- in the removal's transaction, and a delivery counts only while its service exists.
DELETE FROM delivery_counters dc
WHERE NOT EXISTS (
    SELECT 1 FROM linked_services ls WHERE ls.project_id = dc.project_id AND ls.name = dc.service
);

-- Deliveries a removal could not see (a deletion that committed after the removal read them) stayed open for a
-- service that no longer exists: they are abandoned, as the removal would have, and the deletions left with nothing
-- open complete.
WITH abandoned AS (
    UPDATE deletion_deliveries d SET state = 'abandoned'
    WHERE d.state IN ('pending', 'accepted')
      AND NOT EXISTS (SELECT 1 FROM linked_services ls WHERE ls.project_id = d.project_id AND ls.name = d.service)
    RETURNING d.deletion_id
)
UPDATE deletions SET completed_at = now()
WHERE id IN (SELECT deletion_id FROM abandoned) AND completed_at IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM deletion_deliveries o JOIN linked_services ls ON ls.project_id = o.project_id AND ls.name = o.service
      WHERE o.deletion_id = deletions.id AND o.state IN ('pending', 'accepted'));
