#!/usr/bin/env bash
# Send feedback intake (#27): batches of 1000 dead results (POST .../feedback, wrk c=4) against REGISTRATIONS
# (default 100,000) seeded registrations, beside the token refresh callback (wrk c=64) on the same service and
# database; results a second against callbacks a second, from one run. Request logs at info, fsync and synchronous
# commit on, as in production.
#   bash bench/feedback.sh            DURATION=10 REGISTRATIONS=100000
. "$(dirname "$0")/lib.sh"
REGISTRATIONS=${REGISTRATIONS:-100000}
build_release
start_postgres
# The breaker out of reach: every batch here is a real sender's dead tokens, applied as retirements.
start_service 18080 DB_POOL_SIZE=${DB_POOL_SIZE:-16} FEEDBACK_BREAKER_MINIMUM=1000000
env DATABASE_URL="$PGURL" "$BIN" project create --id bench-proj --number 4242 >"$WORK/project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform android >"$WORK/app.json"
SERVER_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/project.json")
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/app.json")
seed_callback_fids "$APP_ID" "$REGISTRATIONS"

echo "# feedback: wrk -t2 -c4 -d${DURATION}s, 1000 results a request; callback: wrk -t2 -c$CONNECTIONS -d${DURATION}s"
echo "name rps p50_ms p99_ms errors"
CONNECTIONS=4 SERVER_KEY=$SERVER_KEY REGISTRATIONS=$REGISTRATIONS run_wrk feedback-1000 http://127.0.0.1:18080/ \
  -s "$BENCH_DIR/wrk/feedback.lua"
SERVER_KEY=$SERVER_KEY run_wrk callback http://127.0.0.1:18080/ -s "$BENCH_DIR/wrk/refresh_callback.lua"
python3 - "$WORK" "$PGURL" <<'PY'
import re, subprocess, sys
w = sys.argv[1]
batches = float(re.search(r"Requests/sec:\s+([\d.]+)", open(f"{w}/feedback-1000.wrk").read()).group(1))
callbacks = float(re.search(r"Requests/sec:\s+([\d.]+)", open(f"{w}/callback.wrk").read()).group(1))
retired = subprocess.run(["psql", sys.argv[2], "-Atc", "SELECT count(*) FROM registrations WHERE state = 'retired'"],
                         capture_output=True, text=True).stdout.strip()
print(f"feedback: {batches:.1f} batches/s = {batches * 1000:.0f} results/s ({retired} registrations retired)")
print(f"ratio feedback results/s ÷ callbacks/s: {batches * 1000 / callbacks:.1f}")
PY
