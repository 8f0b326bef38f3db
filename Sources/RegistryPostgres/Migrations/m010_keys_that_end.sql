-- Signing keys can be retired (they stop verifying); server keys can expire (rotation with an overlap, revocation).
ALTER TABLE signing_keys ADD COLUMN retired_at timestamptz;
ALTER TABLE server_keys ADD COLUMN expires_at timestamptz;
-- Secrets at rest are sealed (AES-256-GCM under the operator's master key) by the service before they are written:
-- signing_keys.private_pem, server_secrets.secret, linked_services.secret and previous_secret hold `enc1:` values.
