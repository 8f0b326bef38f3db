#!/bin/sh
# Runs once, when the database is first initialised (the postgres image's /docker-entrypoint-initdb.d, and the local
# stand-in's entrypoint): the service's own role, which owns the registry's database and nothing else. It is not a
# superuser, cannot create roles or databases, and cannot read files on the server: the service never needs more.
set -eu
: "${REGISTRY_DB_PASSWORD:?set REGISTRY_DB_PASSWORD, the password of the service's database role}"
psql -v ON_ERROR_STOP=1 -v password="$REGISTRY_DB_PASSWORD" --username "${POSTGRES_USER:-postgres}" \
  --dbname "${POSTGRES_DB:-postgres}" <<'SQL'
CREATE ROLE registry LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD :'password';
SELECT format('ALTER DATABASE %I OWNER TO registry', current_database()) \gexec
SQL
