#!/usr/bin/env bash
# Registration workloads: token refresh callbacks (wrk, c=64) beside pgbench on the same database, twice: the
# single-row upsert (the database's ceiling for a token write) and the callback's own SQL (registry_refresh);
# 1000-token IID batchAdd requests; and streaming every member of a topic with SUBSCRIBERS (default 1,000,000)
# subscribers page by page.
#   bash bench/registrations.sh            DURATION=10 CONNECTIONS=64 SUBSCRIBERS=1000000
. "$(dirname "$0")/lib.sh"
SUBSCRIBERS=${SUBSCRIBERS:-1000000}
build_release
start_postgres
start_service 18080 DB_POOL_SIZE=${DB_POOL_SIZE:-16}
env DATABASE_URL="$PGURL" "$BIN" project create --id bench-proj --number 4242 >"$WORK/project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform android >"$WORK/app.json"
SERVER_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/project.json")
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/app.json")

# Installations with messaging consent, made in SQL: 1000 for the callbacks and batches, then the topic's subscribers.
psql "$PGURL" -q <<SQL
INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
  SELECT 'bench-proj', 'f' || lpad(n::text, 21, '0'), '$APP_ID', '\x00', now(), now() FROM generate_series(1, $SUBSCRIBERS + 1000) AS n;
INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
  SELECT 'bench-proj', fid, 'messaging', true, 'default', now() FROM installations WHERE project_id = 'bench-proj';
INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
  SELECT 'bench-proj', fid, fid || ':seed', 'android', now(), now() FROM installations WHERE project_id = 'bench-proj';
INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
  SELECT 'bench-proj', 'f' || lpad(n::text, 21, '0'), 'big', now() FROM generate_series(1001, $SUBSCRIBERS + 1000) AS n;
-- What autovacuum does to rows that have settled: hint bits set, the visibility map written (index-only scans).
VACUUM ANALYZE;
SQL

echo "# registrations: wrk -t2 -c$CONNECTIONS -d${DURATION}s beside pgbench -c$CONNECTIONS -j2 -T$DURATION -M prepared"
echo "name rps p50_ms p99_ms errors"
SERVER_KEY=$SERVER_KEY run_wrk callback http://127.0.0.1:18080/ -s "$BENCH_DIR/wrk/refresh_callback.lua"
pgbench -n -c "$CONNECTIONS" -j 2 -T "$DURATION" -M prepared -f "$BENCH_DIR/pgbench/registration_upsert.sql" "$PGURL" \
  >"$WORK/pgbench-upsert.pgbench" 2>&1
pgbench -n -c "$CONNECTIONS" -j 2 -T "$DURATION" -M prepared -f "$BENCH_DIR/pgbench/refresh_callback.sql" "$PGURL" \
  >"$WORK/pgbench-refresh.pgbench" 2>&1
python3 - "$WORK" <<'PY'
import re, sys
w = sys.argv[1]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", open(f"{w}/callback.wrk").read()).group(1))
for name in ("upsert", "refresh"):
    text = open(f"{w}/pgbench-{name}.pgbench").read()
    tps = float(re.search(r"tps = ([\d.]+)", text).group(1))
    lat = float(re.search(r"latency average = ([\d.]+) ms", text).group(1))
    print(f"pgbench-{name} {tps:.0f} avg={lat:.2f} - 0")
    print(f"ratio callback/pgbench-{name}: {rps / tps:.2f}")
PY

echo "# IID batchAdd, 1000 tokens a request"
python3 -c 'import json; print(json.dumps({"to": "/topics/batch", "registration_tokens": ["f%021d:seed" % n for n in range(1, 1001)]}))' >"$WORK/batch.json"
CONNECTIONS=4 SERVER_KEY=$SERVER_KEY BODY_FILE=$WORK/batch.json run_wrk batchAdd-1000 http://127.0.0.1:18080/iid/v1:batchAdd \
  -s "$BENCH_DIR/wrk/batch_add.lua"
python3 - "$WORK" <<'PY'
import re, sys
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", open(f"{sys.argv[1]}/batchAdd-1000.wrk").read()).group(1))
print(f"batchAdd: {rps:.1f} requests/s = {rps * 1000:.0f} token-subscriptions/s")
PY

echo "# streaming a topic with $SUBSCRIBERS subscribers, pageSize=10000, three times"
for _ in 1 2 3; do python3 "$BENCH_DIR/stream_targets.py" 18080 bench-proj big "$SERVER_KEY" "$SUBSCRIBERS" topic; done
