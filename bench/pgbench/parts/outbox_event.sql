-- The refresh's change-feed event alone: one row of the outbox.
\set n random(1, 1000)
INSERT INTO event_outbox (project_id, type, fid, data)
VALUES ('bench-proj', 'registration.refreshed', 'f' || lpad(:n::text, 21, '0'), '{"platform":"android"}');
