#!/usr/bin/env bash
# Every workload beside its reference, at c=16, 64 and 256, in one run; writes the tables into docs/benchmarks.md.
#   bash bench/run.sh                       DURATION=10 CONCURRENCY="16 64 256" PEER=1 DB_POOL_SIZE=16
# Workloads: /healthz (nginx with a buffered access log), refresh callback (pgbench with the callback's SQL and the
# bare upsert; the fcm-django peer from ../shared/bench/peers registering tokens into the same PostgreSQL), create
# installation and auth token (pgbench with the same SQL), consent change and client registration (pgbench upsert),
# 1000-token batchAdd, and deletions with their fan-out to a linked service on loopback. Production settings: request
# logs at info, fsync and synchronous_commit on. PEER=0 leaves the peer out (it needs PyPI for its venv).
. "$(dirname "$0")/lib.sh"
# DURATION's default (10 s a run) is lib.sh's.
export DURATION CONCURRENCY=${CONCURRENCY:-16 64 256}
PEER=${PEER:-1}
PEER_DIR=${PEER_DIR:-$REPO/../shared/bench/peers}
build_release
start_postgres
start_service 18080 DB_POOL_SIZE=${DB_POOL_SIZE:-16} LINKED_SERVICE_ALLOW_PRIVATE=true JOBS_INTERVAL_SECONDS=1
start_nginx 18081
PEER_PID= PEER_PORT= PEER_LUA=
if [ "$PEER" = 1 ] && [ -d "$PEER_DIR/djproj" ]; then
  # fcm-django's FCMDeviceViewSet under gunicorn (sync workers, 2 x cores + 1), in a database of the same cluster.
  if [ ! -x "$WORK/peer-venv/bin/gunicorn" ]; then
    python3 -m venv "$WORK/peer-venv"
    "$WORK/peer-venv/bin/pip" install -q fcm-django django djangorestframework 'psycopg[binary]' gunicorn >&2
  fi
  rm -rf "$WORK/djproj" && cp -r "$PEER_DIR/djproj" "$WORK/djproj"
  PEER_LUA=$PEER_DIR/wrk/register.lua
  psql "$PGURL" -qc "DROP DATABASE IF EXISTS peer WITH (FORCE)" -c "CREATE DATABASE peer" >/dev/null
  export PEER=fcm PGHOST=$WORK/pg PGPORT=${BENCH_PG_PORT:-55433} PGUSER=postgres PGDATABASE=peer
  (cd "$WORK/djproj" && "$WORK/peer-venv/bin/python" manage.py migrate -v0)
  (cd "$WORK/djproj" && GUNICORN_BIND=127.0.0.1:18082 GUNICORN_ERRORLOG="$WORK/gunicorn.log" \
    exec "$WORK/peer-venv/bin/gunicorn" -c gunicorn.conf.py peerbench_site.wsgi:application) &
  PEER_PID=$!
  PIDS+=("$PEER_PID")
  PEER_PORT=18082
  for _ in $(seq 1 100); do
    curl -s -o /dev/null http://127.0.0.1:18082/devices/ && break
    sleep 0.2
  done
  unset PGHOST PGPORT PGUSER PGDATABASE
  PEER_VERSION=$("$WORK/peer-venv/bin/pip" freeze | grep -iE '^(fcm-django|django|gunicorn)==' | paste -sd' ')
else
  echo "the fcm-django peer is left out (PEER=$PEER, $PEER_DIR)" >&2
fi
VERSIONS=$(
  echo "$(date -u +%FT%TZ) $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)"
  echo "token-registry $(git -C "$REPO" rev-parse --short HEAD), $(swift --version 2>&1 | head -1)"
  psql "$PGURL" -tAc "select version()" | cut -d, -f1
  echo "$(nginx -v 2>&1), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), ${PEER_VERSION:-no peer}"
)
export WORK BENCH_DIR REPO BIN PGURL SERVICE_PID SERVICE_PORT=18080 NGINX_PORT=18081 NGINX_PID PEER_PID PEER_PORT PEER_LUA VERSIONS
export COMMAND="DURATION=$DURATION CONCURRENCY=\"$CONCURRENCY\" bash bench/run.sh"
python3 "$BENCH_DIR/run.py"
