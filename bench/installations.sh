#!/usr/bin/env bash
# Installation workloads against the database's own ceiling: wrk (c=64) creating installations and minting auth
# tokens through the service, beside pgbench running the same SQL (prepared, one transaction per request) on the
# same database. PostgreSQL runs with fsync and synchronous_commit on.
#   bash bench/installations.sh          DURATION=10 CONNECTIONS=64
. "$(dirname "$0")/lib.sh"
build_release
start_postgres
start_service 18080
env DATABASE_URL="$PGURL" "$BIN" project create --id bench-proj --number 4242 >"$WORK/project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform web >"$WORK/app.json"
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/app.json")
API_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["apiKey"])' "$WORK/app.json")
created=$(curl -fs -H "x-goog-api-key: $API_KEY" -d "{\"appId\":\"$APP_ID\",\"fid\":\"\"}" http://127.0.0.1:18080/v1/projects/bench-proj/installations)
FID=$(echo "$created" | python3 -c 'import json,sys; print(json.load(sys.stdin)["fid"])')
REFRESH=$(echo "$created" | python3 -c 'import json,sys; print(json.load(sys.stdin)["refreshToken"])')

echo "# installations: wrk -t2 -c$CONNECTIONS -d${DURATION}s beside pgbench -c$CONNECTIONS -j2 -T$DURATION -M prepared"
echo "name rps p50_ms p99_ms errors"
APP_ID=$APP_ID API_KEY=$API_KEY run_wrk create http://127.0.0.1:18080/v1/projects/bench-proj/installations \
  -s "$BENCH_DIR/wrk/create_installation.lua"
FID=$FID REFRESH=$REFRESH run_wrk generate "http://127.0.0.1:18080/v1/projects/bench-proj/installations/$FID/authTokens:generate" \
  -s "$BENCH_DIR/wrk/generate_token.lua"

run_pgbench() {
  local name=$1 file=$2
  pgbench -n -c "$CONNECTIONS" -j 2 -T "$DURATION" -M prepared -r -D app_id="$APP_ID" -D fid="$FID" -f "$file" \
    "$PGURL" >"$WORK/$name.pgbench" 2>&1 || { cat "$WORK/$name.pgbench" >&2; return 1; }
  python3 - "$name" "$WORK/$name.pgbench" <<'PY'
import re, sys
text = open(sys.argv[2]).read()
tps = float(re.search(r"tps = ([\d.]+)", text).group(1))
lat = float(re.search(r"latency average = ([\d.]+) ms", text).group(1))
print(f"{sys.argv[1]} {tps:.0f} avg={lat:.2f} - 0")
PY
}
run_pgbench pgbench-create "$BENCH_DIR/pgbench/create_installation.sql"
run_pgbench pgbench-generate "$BENCH_DIR/pgbench/generate_token.sql"
python3 - "$WORK" <<'PY'
import re, sys
w = sys.argv[1]
rps = lambda n: float(re.search(r"Requests/sec:\s+([\d.]+)", open(f"{w}/{n}.wrk").read()).group(1))
tps = lambda n: float(re.search(r"tps = ([\d.]+)", open(f"{w}/{n}.pgbench").read()).group(1))
print(f"ratio create/pgbench: {rps('create') / tps('pgbench-create'):.2f}")
print(f"ratio generate/pgbench: {rps('generate') / tps('pgbench-generate'):.2f}")
PY
