-- Receipts only the linked service can write. A secret handed out by a server-key call (at creation, or when the
-- project re-keys a service) is known to the project: it signs notices and can ask for a new secret, but an
-- acknowledgement signed with it is refused. A secret the service asked for itself (a rotation signed with its
-- current one) is the service's alone. A project re-key is remembered for good, and every delivery acknowledged
-- after it carries its time into the receipt.
ALTER TABLE linked_services
    ADD COLUMN secret_holder text NOT NULL DEFAULT 'project' CHECK (secret_holder IN ('project', 'service')),
    ADD COLUMN previous_secret_holder text CHECK (previous_secret_holder IN ('project', 'service')),
    ADD COLUMN rekeyed_by_project_at timestamptz;
UPDATE linked_services SET previous_secret_holder = 'project' WHERE previous_secret IS NOT NULL;
ALTER TABLE deletion_deliveries ADD COLUMN rekeyed_by_project_at timestamptz;

-- Deliveries are claimed per project (at most a few of each project's a claim), so one project's backlog never
-- starves another's: the project is on the delivery row, and an index serves each project's due deliveries in order.
ALTER TABLE deletion_deliveries ADD COLUMN project_id text;
UPDATE deletion_deliveries d SET project_id = del.project_id FROM deletions del WHERE del.id = d.deletion_id;
ALTER TABLE deletion_deliveries ALTER COLUMN project_id SET NOT NULL;
CREATE INDEX deletion_deliveries_project_due ON deletion_deliveries (project_id, next_attempt_at)
    WHERE state = 'pending';
