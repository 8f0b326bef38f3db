-- The SQL of one token refresh callback, exactly as the service sends it since migration 26 (one body since 27): one
-- call of registry_refresh_token_audited (lock, consent, clientTime check, token move, upsert, change-feed event and
-- the call's audit entry) in an implicit transaction, for one of 1000 installations with a new token each time.
-- Until session 16 this script ran migration 11's registry_refresh (no move check, no audit entry): the service did
-- more for each "same SQL" call than the reference did.
\set n random(1, 1000)
SELECT outcome, previous, moved_from, (reg).* FROM registry_refresh_token_audited('bench-proj',
    'f' || lpad(:n::text, 21, '0'), 'f' || lpad(:n::text, 21, '0') || ':' || 'pg' || txid_current(), 'android', NULL,
    NULL, 'active', NULL, now(), now(), 300, 'messaging', 'registration.created', 'registration.refreshed',
    'registration.moved', '{"platform":"android"}', now(), 'registration.refresh', 'f' || lpad(:n::text, 21, '0'),
    sha256(('f' || lpad(:n::text, 21, '0'))::bytea), true, 'serverKey:0a1b2c3d4e5f', 'pgbench',
    '{not_found,ahead,consent_off,older,written}', '{NOT_FOUND,FAILED_PRECONDITION,FAILED_PRECONDITION,OK,OK}');
