#!/bin/sh
# Initialises $PGDATA on first start (superuser postgres with $POSTGRES_PASSWORD, database $POSTGRES_DB), then runs
# PostgreSQL in the foreground as the postgres user, listening on every address with password authentication.
set -eu
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}" > /tmp/pwfile
  chown postgres /tmp/pwfile
  runuser -u postgres -- initdb -D "$PGDATA" -U postgres --pwfile=/tmp/pwfile --auth-local=trust \
    --auth-host=scram-sha-256 >/dev/null
  rm -f /tmp/pwfile
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ -n "${POSTGRES_DB:-}" ] && [ "$POSTGRES_DB" != postgres ]; then
    runuser -u postgres -- postgres --single -D "$PGDATA" postgres <<SQL >/dev/null
CREATE DATABASE "$POSTGRES_DB";
SQL
  fi
  # As the official image does: the scripts of /docker-entrypoint-initdb.d, once, against a server on its socket only.
  if ls /docker-entrypoint-initdb.d/*.sh >/dev/null 2>&1; then
    runuser -u postgres -- pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
    for script in /docker-entrypoint-initdb.d/*.sh; do
      runuser -u postgres -- env PGHOST=/run/postgresql sh "$script"
    done
    runuser -u postgres -- pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
  fi
fi
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*' "$@"
