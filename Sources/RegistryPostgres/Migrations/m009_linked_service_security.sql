-- A service removed while deliveries to it were open: those deliveries read 'abandoned' (never 'acknowledged').
ALTER TABLE deletion_deliveries DROP CONSTRAINT deletion_deliveries_state_check;
ALTER TABLE deletion_deliveries ADD CONSTRAINT deletion_deliveries_state_check
    CHECK (state IN ('pending', 'accepted', 'acknowledged', 'abandoned'));
-- Secret rotation: the previous secret keeps signing (beside the new one) and verifying acks for 24 hours.
ALTER TABLE linked_services ADD COLUMN previous_secret text, ADD COLUMN previous_secret_until timestamptz;
