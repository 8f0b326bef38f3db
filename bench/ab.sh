#!/usr/bin/env bash
# Two revisions of the service side by side on the same machine and PostgreSQL: release builds of BASE and HEAD
# (git worktrees under $WORK), each on a database of its own, measured alternately (PASSES rounds) on the refresh
# callback (wrk, refresh_callback.lua) and GET /healthz; prints each pass and HEAD/BASE ratios of the best passes.
# TOGETHER=1 loads both at once instead and prints their CPU a request side by side (BASE_BIN and HEAD_BIN may name
# prebuilt binaries).
# For a change's cost on the hot paths, with production settings (request logs at info, fsync and synchronous commit
# on).
#   BASE=<rev> bash bench/ab.sh          DURATION=10 CONNECTIONS=64 PASSES=2 TOGETHER=0 WORKLOADS="callback healthz"
. "$(dirname "$0")/lib.sh"
BASE=${BASE:?set BASE to the revision to compare HEAD with}
PASSES=${PASSES:-2}
binary() {  # binary REV: a release build of REV, made once per commit under $WORK
  local rev commit dir
  rev=$1
  commit=$(git -C "$REPO" rev-parse "$rev")
  dir=$WORK/build-$commit
  if [ ! -x "$dir/.build/release/token-registry" ]; then
    rm -rf "$dir"
    git -C "$REPO" worktree add --detach --force "$dir" "$commit" >&2
    (cd "$dir" && . scripts/swift-env.sh && swift build -c release --product token-registry >&2)
  fi
  echo "$dir/.build/release/token-registry"
}
# Prebuilt binaries may stand in for the revisions' builds (BASE_BIN, HEAD_BIN).
BASE_BIN=${BASE_BIN:-$(binary "$BASE")}
HEAD_BIN=${HEAD_BIN:-$(binary HEAD)}
start_postgres
port=18090
for side in base head; do
  bin=$BASE_BIN
  [ "$side" = head ] && bin=$HEAD_BIN
  psql "$TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS ab_$side WITH (FORCE)" -c "CREATE DATABASE ab_$side" >/dev/null
  url="${PGURL/dbname=bench/dbname=ab_$side}"
  env DATABASE_URL="$url" "$bin" migrate >/dev/null
  env DATABASE_URL="$url" "$bin" project create --id bench-proj --number 4242 >"$WORK/ab-$side-project.json"
  env DATABASE_URL="$url" "$bin" app create --project bench-proj --platform android >"$WORK/ab-$side-app.json"
  app=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/ab-$side-app.json")
  psql "$url" -q <<SQL
INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
  SELECT 'bench-proj', 'f' || lpad(n::text, 21, '0'), '$app', '\x00', now(), now() FROM generate_series(1, 1000) AS n;
INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
  SELECT 'bench-proj', fid, 'messaging', true, 'default', now() FROM installations WHERE project_id = 'bench-proj';
VACUUM ANALYZE;
SQL
  env DATABASE_URL="$url" PORT=$port HOST=127.0.0.1 LOG_LEVEL=info RATE_LIMIT_CREATE_PER_KEY=0 \
    RATE_LIMIT_CREATE_PER_ADDRESS=0 "$bin" serve >>"$WORK/ab-$side.log" 2>&1 &
  PIDS+=("$!")
  eval "${side^^}_PID=$!"
  for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  eval "${side^^}_PORT=$port"
  port=$((port + 1))
done
echo "# BASE $(git -C "$REPO" rev-parse --short "$BASE") vs HEAD $(git -C "$REPO" rev-parse --short HEAD): wrk -t2 -c$CONNECTIONS -d${DURATION}s"
if [ "${TOGETHER:-0}" = 1 ]; then
  # Both sides under load at once, each by its own wrk: the machine's speed, which drifts by ±15 % from one minute
  # to the next here, is then the same for both, and the ratio of their CPU a request holds where alternate runs
  # cannot show a difference of 5 %.
  cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  for w in ${WORKLOADS:-callback healthz}; do
    for pass in $(seq 1 "$PASSES"); do
      declare -A before=()
      for side in base head; do p=${side^^}_PID; before[$side]=$(cpu "${!p}"); done
      loads=()
      for side in base head; do
        p=${side^^}_PORT
        key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/ab-$side-project.json")
        case $w in
          callback) args=("http://127.0.0.1:${!p}/" -s "$BENCH_DIR/wrk/refresh_callback.lua") ;;
          healthz) args=("http://127.0.0.1:${!p}/healthz" -s "$BENCH_DIR/wrk/get.lua") ;;
        esac
        SERVER_KEY=$key wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "${args[@]}" >"$WORK/ab-$w-$side-$pass.wrk" 2>&1 &
        loads+=("$!")
      done
      wait "${loads[@]}"
      line="$w pass $pass:"
      for side in base head; do
        p=${side^^}_PID
        n=$(awk '/requests in/ {print $1}' "$WORK/ab-$w-$side-$pass.wrk")
        us=$(( ($(cpu "${!p}") - ${before[$side]}) * 1000000 / $(getconf CLK_TCK) / n ))
        eval "${side}_us=$us"
        line="$line $side $n requests, $us µs a request;"
      done
      echo "$line HEAD/BASE CPU a request $(python3 -c "print(f'{$head_us / $base_us:.3f}')")"
    done
  done
  exit 0
fi
echo "name rps p50_ms p99_ms errors"
for pass in $(seq 1 "$PASSES"); do
  for side in base head; do
    p=BASE_PORT
    [ "$side" = head ] && p=HEAD_PORT
    key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/ab-$side-project.json")
    SERVER_KEY=$key run_wrk "callback-$side-$pass" "http://127.0.0.1:${!p}/" -s "$BENCH_DIR/wrk/refresh_callback.lua"
    run_wrk "healthz-$side-$pass" "http://127.0.0.1:${!p}/healthz"
  done
done
python3 - "$WORK" "$PASSES" <<'PY'
import re, sys
work, passes = sys.argv[1], int(sys.argv[2])
def best(name):
    return max(float(re.search(r"Requests/sec:\s+([\d.]+)", open(f"{work}/{name}-{p}.wrk").read()).group(1))
               for p in range(1, passes + 1))
for workload in ("callback", "healthz"):
    b, h = best(f"{workload}-base"), best(f"{workload}-head")
    print(f"{workload}: HEAD/BASE {h / b:.2f} ({h:.0f} / {b:.0f} req/s, best pass each)")
PY
