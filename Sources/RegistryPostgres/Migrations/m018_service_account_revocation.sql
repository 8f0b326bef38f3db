-- Service accounts can be revoked (`token-registry serviceaccount revoke`): assertions signed with a revoked
-- account's key are refused, and its access tokens, which name it, stop within 30 s on every replica.
ALTER TABLE service_accounts ADD COLUMN revoked_at timestamptz;
