#!/usr/bin/env bash
# Where the service's CPU goes, per workload: wrk at c=64 for DURATION seconds while `perf record -g` samples the
# service (and, separately, PostgreSQL's backends), then the top of `perf report` for each. Production settings: logs
# at info, fsync and synchronous commit on.
#   bash bench/profile.sh [healthz|callback|create|token|subscribe|consent ...]   DURATION=10 PERCENT=1.5 PERF=1
# PERF=0 skips the sampled pass (CPU a request only: a before/after with BENCH_BIN).
. "$(dirname "$0")/lib.sh"
WORKLOADS=${*:-healthz callback create token}
PERCENT=${PERCENT:-1.5}
build_release
start_postgres
start_service 18080 DB_POOL_SIZE=16 ${SERVICE_ENV:-}
env DATABASE_URL="$PGURL" "$BIN" project create --id bench-proj --number 4242 >"$WORK/project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform android >"$WORK/app.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform web >"$WORK/web.json"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }
SERVER_KEY=$(field "$WORK/project.json" serverKey)
APP_ID=$(field "$WORK/app.json" appId)
WEB_ID=$(field "$WORK/web.json" appId)
WEB_KEY=$(field "$WORK/web.json" apiKey)
seed_callback_fids "$APP_ID"
created=$(curl -s -H "x-goog-api-key: $WEB_KEY" -H 'Content-Type: application/json' \
  -d "{\"fid\":\"\",\"appId\":\"$WEB_ID\",\"authVersion\":\"FIS_v2\",\"sdkVersion\":\"w:0.6.24\"}" \
  http://127.0.0.1:18080/v1/projects/bench-proj/installations)
FID=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["fid"])' "$created")
REFRESH=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["refreshToken"])' "$created")
cpu_ms() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for w in $WORKLOADS; do
  case $w in
    healthz) args=(http://127.0.0.1:18080/healthz -s "$BENCH_DIR/wrk/get.lua") ;;
    callback) args=(http://127.0.0.1:18080/ -s "$BENCH_DIR/wrk/refresh_callback.lua") ;;
    create) args=(http://127.0.0.1:18080/v1/projects/bench-proj/installations -s "$BENCH_DIR/wrk/create_installation.lua") ;;
    token) args=("http://127.0.0.1:18080/v1/projects/bench-proj/installations/$FID/authTokens:generate"
                 -s "$BENCH_DIR/wrk/generate_token.lua") ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
  load() {
    SERVER_KEY=$SERVER_KEY APP_ID=$WEB_ID API_KEY=$WEB_KEY REFRESH=$REFRESH \
      wrk -t2 -c64 -d"${DURATION}s" "${args[@]}" >"$WORK/profile-$w.wrk" 2>&1
  }
  # First without perf, for the CPU a request; then sampled.
  before=$(cpu_ms "$SERVICE_PID")
  pg_before=$(postgres_ticks)
  load
  after=$(cpu_ms "$SERVICE_PID")
  pg_after=$(postgres_ticks)
  done_=$(awk '/requests in/ {print $1}' "$WORK/profile-$w.wrk")
  per() { echo $(( $1 * 1000000000 / $(getconf CLK_TCK) / done_ / 1000 )); }
  echo "## $w: $(grep -E 'Requests/sec' "$WORK/profile-$w.wrk" | xargs), $(grep -E 'Latency' "$WORK/profile-$w.wrk" | xargs)," \
    "service CPU $(per $(( after - before ))) µs a request, PostgreSQL CPU $(per $(( pg_after - pg_before ))) µs a request"
  [ "${PERF:-1}" = 1 ] || continue
  perf record -F 499 -g -o "$WORK/perf-$w.data" -p "$SERVICE_PID" -- sleep "$DURATION" >/dev/null 2>&1 &
  perf_pid=$!
  load
  wait "$perf_pid" || true
  perf report -i "$WORK/perf-$w.data" --no-children --percent-limit "$PERCENT" --stdio -g none 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -40
done
