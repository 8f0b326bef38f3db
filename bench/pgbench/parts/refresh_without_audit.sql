-- The refresh callback's function without its audit entry (the action NULL): what the entry costs the call.
\set n random(1, 1000)
SELECT outcome, previous, moved_from, (reg).* FROM registry_refresh_token_audited('bench-proj',
    'f' || lpad(:n::text, 21, '0'), 'f' || lpad(:n::text, 21, '0') || ':' || 'pg' || txid_current(), 'android', NULL,
    NULL, 'active', NULL, now(), now(), 300, 'messaging', 'registration.created', 'registration.refreshed',
    'registration.moved', '{"platform":"android"}', now(), NULL, 'f' || lpad(:n::text, 21, '0'),
    sha256(('f' || lpad(:n::text, 21, '0'))::bytea), true, 'serverKey:0a1b2c3d4e5f', 'pgbench',
    '{not_found,ahead,consent_off,older,written}', '{NOT_FOUND,FAILED_PRECONDITION,FAILED_PRECONDITION,OK,OK}');
