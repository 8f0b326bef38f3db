-- The SQL of one token refresh callback, exactly as the service sends it since migration 11: one call of
-- registry_refresh (lock, consent, clientTime check, upsert, change-feed event) in an implicit transaction, for one
-- of 1000 installations with a new token each time.
\set n random(1, 1000)
SELECT outcome, previous, (reg).* FROM registry_refresh('bench-proj', 'f' || lpad(:n::text, 21, '0'),
    'f' || lpad(:n::text, 21, '0') || ':' || 'pg' || txid_current(), 'android', NULL, NULL, 'active', NULL, now(),
    now(), 300, 'messaging', 'registration.created', 'registration.refreshed', '{"platform":"android"}');
