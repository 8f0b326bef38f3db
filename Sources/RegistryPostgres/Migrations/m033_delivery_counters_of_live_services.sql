-- A linked service's delivery counters (the /metrics series registry_delivery_attempts_total and _failures_total)
-- leave with the service: a project that added and removed services in a loop left a row, and two series, for every
-- name it ever used. The rows of services removed before this migration go now; the service store deletes the row
-- in the removal's transaction, and a delivery counts only while its service exists.
DELETE FROM delivery_counters dc
WHERE NOT EXISTS (
    SELECT 1 FROM linked_services ls WHERE ls.project_id = dc.project_id AND ls.name = dc.service
);
