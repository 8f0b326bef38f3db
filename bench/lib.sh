# Shared helpers for the benchmark scripts: a release build, a PostgreSQL cluster with durable commits,
# the service, wrk parsing. Everything listens on 127.0.0.1 and is stopped by pid on exit.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
WORK=${BENCH_WORK:-/tmp/token-registry-bench}
mkdir -p "$WORK"
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
PIDS=()
# What the scripts run besides the service: the load generator, the nginx reference, perf for the profiles.
"$REPO/scripts/install-deps.sh" wrk nginx linux-perf pgbouncer >&2

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  PG_ROOT=$WORK/pg PG_PORT=${BENCH_PG_PORT:-55433} "$REPO/scripts/pg-test-cluster.sh" stop || true
}
trap cleanup EXIT

# BENCH_BIN runs a binary built elsewhere instead (a before/after pair: build each, then run the script twice).
build_release() {
  if [ -n "${BENCH_BIN:-}" ]; then BIN=$BENCH_BIN; return; fi
  (cd "$REPO" && . scripts/swift-env.sh && swift build -c release --product token-registry >&2)
  BIN=$REPO/.build/release/token-registry
}

# CPU ticks (user + system, reaped children included) of PostgreSQL: the postmaster and every backend.
postgres_ticks() {
  local root pid total=0
  root=$(head -1 "$WORK/pg/data/postmaster.pid")
  for pid in "$root" $(pgrep -P "$root"); do
    [ -r "/proc/$pid/stat" ] && total=$(( total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$pid/stat") ))
  done
  echo "$total"
}

start_postgres() {
  # fsync and synchronous commit on: an acknowledged write is durable, as in production. shared_buffers as a
  # production server sizes it (a quarter of memory is the usual advice; 2 GB of this machine's 24), not Debian's
  # 128 MB default: at 1,000,000 installations the tables and indexes outgrow 128 MB and every random read of a row
  # becomes a copy from the kernel's cache (docs/operations.md, "Sizing").
  local cluster_env
  cluster_env=$(PG_ROOT=$WORK/pg PG_PORT=${BENCH_PG_PORT:-55433} PG_FSYNC=on \
    PG_OPTIONS="-c shared_buffers=${BENCH_SHARED_BUFFERS:-2GB} ${BENCH_PG_OPTIONS:-}" "$REPO/scripts/pg-test-cluster.sh" start)
  eval "$cluster_env"
  PGURL="host=$WORK/pg port=${BENCH_PG_PORT:-55433} dbname=bench user=postgres"
  psql "$TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS bench WITH (FORCE)" -c "CREATE DATABASE bench" >/dev/null
}

# seed_callback_fids APP_ID [N]: N installations of bench-proj (default 1000) named f000…001 to f…N, each with
# messaging consent and a registration: what the refresh-callback workloads (wrk/refresh_callback.lua, the pgbench
# scripts) address.
seed_callback_fids() {
  psql "$PGURL" -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
  SELECT 'bench-proj', 'f' || lpad(n::text, 21, '0'), '$1', '\x00', now(), now() FROM generate_series(1, ${2:-1000}) AS n;
INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
  SELECT 'bench-proj', fid, 'messaging', true, 'default', now() FROM installations WHERE project_id = 'bench-proj';
INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
  SELECT 'bench-proj', fid, fid || ':seed', 'android', now(), now() FROM installations WHERE project_id = 'bench-proj';
VACUUM ANALYZE;
SQL
}

# start_service PORT [ENV=VALUE…]: runs `serve` against the bench database, waits for /readyz.
start_service() {
  local port=$1; shift
  env DATABASE_URL="$PGURL" PORT="$port" HOST=127.0.0.1 LOG_LEVEL=${LOG_LEVEL:-info} \
    RATE_LIMIT_CREATE_PER_KEY=0 RATE_LIMIT_CREATE_PER_ADDRESS=0 "$@" "$BIN" serve >>"$WORK/service-$port.log" 2>&1 &
  SERVICE_PID=$!
  PIDS+=("$SERVICE_PID")
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "service did not become ready; see $WORK/service-$port.log" >&2
  exit 1
}

start_nginx() {
  local port=$1
  mkdir -p "$WORK/nginx"
  sed -e "s#@ROOT@#$WORK#g" -e "s#127.0.0.1:8080#127.0.0.1:$port#" "$REPO/bench/nginx.conf.in" >"$WORK/nginx/nginx.conf"
  nginx -c "$WORK/nginx/nginx.conf" &
  NGINX_PID=$!
  PIDS+=("$NGINX_PID")
  for _ in $(seq 1 50); do curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "nginx did not start" >&2
  exit 1
}

# run_wrk NAME URL [wrk args…]: prints "NAME rps p50_ms p99_ms errors" and stores it in $WORK/NAME.wrk
run_wrk() {
  local name=$1 url=$2; shift 2
  wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$@" "$url" >"$WORK/$name.wrk" 2>&1
  python3 "$BENCH_DIR/wrk_summary.py" "$name" <"$WORK/$name.wrk"
}

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
