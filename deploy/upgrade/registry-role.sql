-- For a compose deployment made before the service had a role of its own (it connected as the superuser): run once,
-- as the superuser, in the registry's database, before starting the new version:
--   docker compose -f deploy/docker-compose.yml exec -T postgres \
--     psql -v ON_ERROR_STOP=1 -v password="$REGISTRY_DB_PASSWORD" -U postgres -d token_registry < deploy/upgrade/registry-role.sql
-- It creates the role (as postgres-init/10-registry-role.sh does on a new volume) and hands it the database and every
-- table, sequence and function the migrations made, so the next migrations run as their owner.
SELECT format('CREATE ROLE registry LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD %L', :'password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'registry') \gexec
SELECT format('ALTER DATABASE %I OWNER TO registry', current_database()) \gexec
SELECT format('ALTER TABLE public.%I OWNER TO registry', tablename) FROM pg_tables WHERE schemaname = 'public' \gexec
SELECT format('ALTER SEQUENCE public.%I OWNER TO registry', sequencename) FROM pg_sequences
WHERE schemaname = 'public' \gexec
SELECT format('ALTER FUNCTION %s OWNER TO registry', p.oid::regprocedure) FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' \gexec
