#!/usr/bin/env bash
# What an hour of refresh callbacks leaves to autovacuum: bench/scale.sh's data (N installations), the service with its
# jobs on their production interval, callbacks at c=CONNECTIONS for CHURN_SECONDS, and every SAMPLE seconds each
# written table's live and dead rows, its heap and index sizes and its autovacuum runs. Production settings: fsync and
# synchronous commit on, request logs at info, PostgreSQL's default autovacuum settings (printed first).
#   bash bench/churn.sh            N=1000000 CHURN_SECONDS=3600 SAMPLE=600 CONNECTIONS=16
CONNECTIONS=${CONNECTIONS:-16}
. "$(dirname "$0")/lib.sh"
N=${N:-1000000}
CHURN_SECONDS=${CHURN_SECONDS:-3600}
SAMPLE=${SAMPLE:-600}
build_release
start_postgres
echo "# bench/churn.sh at $(git -C "$REPO" rev-parse --short HEAD); $(psql "$PGURL" -tAc 'select version()' | cut -d, -f1); N=$N, ${CHURN_SECONDS} s at c=$CONNECTIONS"
psql "$PGURL" -P pager=off -c "SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum_naptime',
  'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_insert_scale_factor', 'autovacuum_vacuum_cost_limit',
  'autovacuum_vacuum_cost_delay', 'shared_buffers', 'synchronous_commit', 'fsync') ORDER BY name"
start_service 18096 DB_POOL_SIZE=16
env DATABASE_URL="$PGURL" "$BIN" project create --id scale-proj --number 777 >"$WORK/churn-project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project scale-proj --platform android >"$WORK/churn-app.json"
SERVER_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/churn-project.json")
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/churn-app.json")
started=$(date +%s)
psql "$PGURL" -q -v ON_ERROR_STOP=1 -v N="$N" -v app_id="$APP_ID" -f "$BENCH_DIR/scale_seed.sql"
echo "seeded $N installations in $(( $(date +%s) - started )) s"

sample() {
  echo "### after $1 s"
  psql "$PGURL" -P pager=off -c "
    SELECT relname, n_live_tup AS live, n_dead_tup AS dead,
      round(100.0 * n_dead_tup / greatest(n_live_tup, 1), 1) AS dead_pct, n_tup_upd AS updates,
      n_tup_hot_upd AS hot, autovacuum_count AS autovacuums,
      pg_size_pretty(pg_table_size(relid)) AS heap, pg_size_pretty(pg_indexes_size(relid)) AS indexes,
      pg_table_size(relid) AS heap_bytes, pg_indexes_size(relid) AS index_bytes
    FROM pg_stat_user_tables
    WHERE relname IN ('registrations', 'installations', 'event_outbox', 'events', 'audit_pending', 'audit_log')
    ORDER BY relname"
}
sample 0
DURATION=$CHURN_SECONDS N=$N WORKLOAD=refresh SERVER_KEY=$SERVER_KEY run_wrk "churn" http://127.0.0.1:18096/ \
  -s "$BENCH_DIR/wrk/scale.lua" >"$WORK/churn.summary" &
load=$!
elapsed=0
while [ "$elapsed" -lt "$CHURN_SECONDS" ]; do
  step=$(( SAMPLE < CHURN_SECONDS - elapsed ? SAMPLE : CHURN_SECONDS - elapsed ))
  sleep "$step"
  elapsed=$(( elapsed + step ))
  sample "$elapsed"
done
wait "$load"
echo "name rps p50_ms p99_ms errors"
cat "$WORK/churn.summary"
