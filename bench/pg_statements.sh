#!/usr/bin/env bash
# What PostgreSQL does for each write route: pg_stat_statements (nested statements too, those inside the PL/pgSQL
# functions and triggers) over DURATION seconds of one workload at c=64, per request: how many times each statement
# ran, its execution time and the blocks it touched, with the jobs (relay, audit chaining) running every second as in
# production. Plus PostgreSQL's CPU a request, from /proc.
#   bash bench/pg_statements.sh [refresh consent subscribe create]      DURATION=10 TOP=12 PRE_SQL=
. "$(dirname "$0")/lib.sh"
WORKLOADS=${*:-refresh consent subscribe create}
TOP=${TOP:-12}
export BENCH_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all ${BENCH_PG_OPTIONS:-}"
build_release
start_postgres
psql "$PGURL" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
start_service 18095 DB_POOL_SIZE=16 JOBS_INTERVAL_SECONDS=1
env DATABASE_URL="$PGURL" "$BIN" project create --id pgs-proj --number 778 >"$WORK/pgs-project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project pgs-proj --platform web >"$WORK/pgs-app.json"
SERVER_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/pgs-project.json")
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/pgs-app.json")
API_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["apiKey"])' "$WORK/pgs-app.json")
N=1000
psql "$PGURL" -q -v ON_ERROR_STOP=1 <<SQL
CREATE TEMP TABLE s AS
  SELECT n, 'c' || lpad(((n::bigint * 48271) % 2147483647)::text, 10, '0') || lpad(n::text, 11, '0') AS fid
  FROM generate_series(1, $N) AS n;
INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
  SELECT 'pgs-proj', fid, '$APP_ID', '\x00', now(), now() FROM s;
INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
  SELECT 'pgs-proj', fid, 'messaging', true, 'default', now() FROM s;
INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
  SELECT 'pgs-proj', fid, left(fid || ':APA91b' || repeat(fid, 6), 152), 'android', now(), now() FROM s;
VACUUM ANALYZE;
SQL
# PRE_SQL: a file of SQL run before the workloads (an earlier definition of a function, for a before/after).
[ -n "${PRE_SQL:-}" ] && psql "$PGURL" -q -v ON_ERROR_STOP=1 -f "$PRE_SQL"
PG=$(head -1 "$WORK/pg/data/postmaster.pid")
tree_ticks() {
  local total=0 pid
  for pid in $1 $(pgrep -P "$1"); do
    total=$(( total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
  done
  echo "$total"
}
echo "# bench/pg_statements.sh at $(git -C "$REPO" rev-parse --short HEAD), c=64, ${DURATION}s each"
for w in $WORKLOADS; do
  psql "$PGURL" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
  p0=$(tree_ticks "$PG"); s0=$(tree_ticks "$SERVICE_PID")
  case $w in
    create) APP_ID=$APP_ID API_KEY=$API_KEY wrk -t2 -c64 -d"${DURATION}s" -s "$BENCH_DIR/wrk/create_installation.lua" \
              http://127.0.0.1:18095/v1/projects/pgs-proj/installations >"$WORK/pgs-$w.wrk" ;;
    *) N=$N PROJECT=pgs-proj WORKLOAD=$w SERVER_KEY=$SERVER_KEY wrk -t2 -c64 -d"${DURATION}s" \
         -s "$BENCH_DIR/wrk/scale.lua" http://127.0.0.1:18095/ >"$WORK/pgs-$w.wrk" ;;
  esac
  sleep 2  # the jobs catch up (relay, audit chain): their work is this workload's too
  p1=$(tree_ticks "$PG"); s1=$(tree_ticks "$SERVICE_PID")
  requests=$(awk '/requests in/ {print $1}' "$WORK/pgs-$w.wrk")
  bad=$(awk '/Non-2xx/ {print $NF}' "$WORK/pgs-$w.wrk")
  echo
  echo "## $w: $requests requests ($(grep Requests/sec "$WORK/pgs-$w.wrk" | xargs); non-2xx: ${bad:-0}); CPU a request:" \
    "PostgreSQL $(( (p1 - p0) * 10000000 / $(getconf CLK_TCK) / requests / 10 )) µs, service $(( (s1 - s0) * 10000000 / $(getconf CLK_TCK) / requests / 10 )) µs"
  psql "$PGURL" -P pager=off -c "
    SELECT round(calls::numeric / $requests, 2) AS per_request, round((total_exec_time * 1000 / $requests)::numeric, 1) AS us_per_request,
      round((shared_blks_hit + shared_blks_read + shared_blks_dirtied)::numeric / calls, 1) AS blocks_per_call,
      left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS statement
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')
      AND query !~ 'pg_stat_statements'
    ORDER BY total_exec_time DESC LIMIT $TOP"
done
