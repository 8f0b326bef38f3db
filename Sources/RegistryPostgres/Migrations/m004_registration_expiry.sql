-- Registrations past the expiry age are reported once in the change feed (registration.expired); a refresh re-arms it.
ALTER TABLE registrations ADD COLUMN expired_reported boolean NOT NULL DEFAULT false;
CREATE INDEX registrations_unreported_expiry ON registrations (refreshed_at) WHERE NOT expired_reported;
