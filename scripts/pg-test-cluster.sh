#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests and benchmarks.
#   scripts/pg-test-cluster.sh start   # prints `export TEST_DATABASE_URL=...`
#   scripts/pg-test-cluster.sh stop
# Configured by PG_ROOT (default /tmp/token-registry-pg), PG_PORT (default 54329), PG_FSYNC (default off), PG_OPTIONS
# (more `-c name=value` server settings; the benchmarks' shared_buffers).
# The cluster listens on a Unix socket in PG_ROOT only (PG_PORT names the socket file): no TCP port can collide.
# initdb and pg_ctl refuse root, so as root they run as the Debian `postgres` user.
set -euo pipefail
PG_ROOT=${PG_ROOT:-/tmp/token-registry-pg}
PG_PORT=${PG_PORT:-54329}
PG_FSYNC=${PG_FSYNC:-off}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$PGBIN/initdb" ] || { echo "PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
  start)
    if [ "$(id -u)" = 0 ]; then
      install -d -o postgres -g postgres -m 700 "$PG_ROOT"
    else
      install -d -m 700 "$PG_ROOT"
    fi
    if [ ! -f "$PG_ROOT/data/PG_VERSION" ]; then
      as_pg "$PGBIN/initdb" -D "$PG_ROOT/data" -U postgres --auth=trust -E UTF8 --locale=C >"$PG_ROOT/initdb.log" 2>&1 \
        || { cat "$PG_ROOT/initdb.log" >&2; exit 1; }
    fi
    if ! as_pg "$PGBIN/pg_ctl" -D "$PG_ROOT/data" status >/dev/null 2>&1; then
      as_pg "$PGBIN/pg_ctl" -D "$PG_ROOT/data" -l "$PG_ROOT/server.log" -w -t 60 \
        -o "-k $PG_ROOT -c listen_addresses='' -p $PG_PORT -c fsync=$PG_FSYNC -c synchronous_commit=on -c full_page_writes=$PG_FSYNC -c max_connections=400 ${PG_OPTIONS:-}" \
        start >/dev/null || { cat "$PG_ROOT/server.log" >&2; exit 1; }
    fi
    echo "export TEST_DATABASE_URL='host=$PG_ROOT port=$PG_PORT dbname=postgres user=postgres'"
    echo "export TEST_PG_BIN='$PGBIN' TEST_PG_DATA='$PG_ROOT/data' TEST_PG_ROOT='$PG_ROOT' TEST_PG_PORT='$PG_PORT'"
    ;;
  stop)
    as_pg "$PGBIN/pg_ctl" -D "$PG_ROOT/data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  *)
    echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
