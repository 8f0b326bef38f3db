-- A deletion whose deliveries were all acknowledged (or abandoned) at the same moment could stay incomplete for ever:
-- two services' acknowledgements, or an acknowledgement and a service's removal, committing together each checked
-- "no delivery left open" in a snapshot where the other's delivery was still open, and neither completed it. Every
-- writer of a delivery's outcome now locks the deletion first (PostgresDeletionStore.lockDeletion); the deletions
-- left this way complete now, at their last acknowledgement.
UPDATE deletions del SET completed_at = coalesce(
    (SELECT max(d.acknowledged_at) FROM deletion_deliveries d WHERE d.deletion_id = del.id), now())
WHERE del.completed_at IS NULL
  AND EXISTS (SELECT 1 FROM deletion_deliveries d WHERE d.deletion_id = del.id)
  AND NOT EXISTS (SELECT 1 FROM deletion_deliveries d WHERE d.deletion_id = del.id AND d.state IN ('pending', 'accepted'));
