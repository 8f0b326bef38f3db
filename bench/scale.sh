#!/usr/bin/env bash
# Flat with data: every measured route's p50/p99, each job's cost, the bytes an installation takes and what refresh
# churn leaves to autovacuum, at each size of SIZES (default 100,000 and 10,000,000 installations).
#   bash bench/scale.sh            SIZES="100000 10000000" DURATION=5 CONNECTIONS=16 CHURN_SECONDS=120
# Each size is seeded in SQL: installations with random FIDs, an FCM registration (152-character token), messaging
# consent with its ledger event, two topics each (region-0..99 and lang-0..19), 1 % deleted (their deletion records,
# done a year ago: the purge's work), and a month of change feed (one event an installation). PostgreSQL with fsync
# and synchronous commit on, shared_buffers 2 GB, pg_stat_statements for the jobs' statements.
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
. "$(dirname "$0")/lib.sh"
SIZES=${SIZES:-100000 10000000}
CHURN_SECONDS=${CHURN_SECONDS:-120}
export BENCH_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all ${BENCH_PG_OPTIONS:-}"
build_release
start_postgres
psql "$PGURL" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
echo "# bench/scale.sh at $(git -C "$REPO" rev-parse --short HEAD); $(psql "$PGURL" -tAc 'select version()' | cut -d, -f1); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)"
for N in $SIZES; do
  psql "$TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS bench WITH (FORCE)" -c "CREATE DATABASE bench" >/dev/null
  psql "$PGURL" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
  # The jobs run only when this script runs them (JOBS_INTERVAL_SECONDS=0), so their cost is measured alone.
  start_service 18090 DB_POOL_SIZE=16 JOBS_INTERVAL_SECONDS=0
  env DATABASE_URL="$PGURL" "$BIN" project create --id scale-proj --number 777 >"$WORK/scale-project.json"
  env DATABASE_URL="$PGURL" "$BIN" app create --project scale-proj --platform android >"$WORK/scale-app.json"
  SERVER_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/scale-project.json")
  APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/scale-app.json")
  API_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["apiKey"])' "$WORK/scale-app.json")
  started=$(date +%s)
  psql "$PGURL" -q -v ON_ERROR_STOP=1 -v N="$N" -v app_id="$APP_ID" -f "$BENCH_DIR/scale_seed.sql"
  echo
  echo "## $N installations (seeded in $(( $(date +%s) - started )) s)"
  FEED_AFTER=$(psql "$PGURL" -tAc "SELECT max(seq) - 1000 FROM events")
  # An installation of the SDK route, for the auth-token workload.
  created=$(curl -s -H "x-goog-api-key: $API_KEY" -H 'Content-Type: application/json' \
    -d "{\"fid\":\"\",\"appId\":\"$APP_ID\",\"authVersion\":\"FIS_v2\",\"sdkVersion\":\"a:17.2.0\"}" \
    http://127.0.0.1:18090/v1/projects/scale-proj/installations)
  FID=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["fid"])' "$created")
  REFRESH=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["refreshToken"])' "$created")
  echo "### routes (wrk -t2 -c$CONNECTIONS -d${DURATION}s, each after a 2 s warm-up run that is not counted)"
  echo "name rps p50_ms p99_ms errors"
  # Reads first: the refreshes replace the seeded tokens that the sendability look-ups name.
  for w in sendability iidinfo topic condition feed receipt; do
    DURATION=2 N=$N WORKLOAD=$w SERVER_KEY=$SERVER_KEY FEED_AFTER=$FEED_AFTER run_wrk "warm" http://127.0.0.1:18090/ \
      -s "$BENCH_DIR/wrk/scale.lua" >/dev/null
    N=$N WORKLOAD=$w SERVER_KEY=$SERVER_KEY FEED_AFTER=$FEED_AFTER run_wrk "scale-$N-$w" http://127.0.0.1:18090/ \
      -s "$BENCH_DIR/wrk/scale.lua" | sed "s/^scale-$N-//"
  done
  APP_ID=$APP_ID API_KEY=$API_KEY run_wrk "create" http://127.0.0.1:18090/v1/projects/scale-proj/installations \
    -s "$BENCH_DIR/wrk/create_installation.lua"
  REFRESH=$REFRESH run_wrk "auth-token" "http://127.0.0.1:18090/v1/projects/scale-proj/installations/$FID/authTokens:generate" \
    -s "$BENCH_DIR/wrk/generate_token.lua"
  for w in consent subscribe refresh; do
    N=$N WORKLOAD=$w SERVER_KEY=$SERVER_KEY run_wrk "scale-$N-$w" http://127.0.0.1:18090/ -s "$BENCH_DIR/wrk/scale.lua" \
      | sed "s/^scale-$N-//"
  done
  run_wrk healthz http://127.0.0.1:18090/healthz -s "$BENCH_DIR/wrk/get.lua"

  echo "### jobs: three runs of \`token-registry jobs run\` (pg_stat_statements: statements of the jobs, per call)"
  psql "$PGURL" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
  for _ in 1 2 3; do
    /usr/bin/time -f "jobs run: %e s" env DATABASE_URL="$PGURL" "$BIN" jobs run >"$WORK/scale-jobs.json" 2>"$WORK/scale-jobs.time"
    echo "  $(cat "$WORK/scale-jobs.time" | tail -1), done: $(tr -d '\n ' <"$WORK/scale-jobs.json")"
  done
  psql "$PGURL" -P pager=off -c "
    SELECT calls, round((total_exec_time / calls)::numeric, 3) AS ms_per_call,
      round(((shared_blks_hit + shared_blks_read)::numeric / calls), 1) AS blocks_per_call,
      round(rows::numeric / calls, 1) AS rows_per_call, left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench') AND calls >= 3 AND query !~* '^(BEGIN|COMMIT|ROLLBACK|SET|SELECT set_config|SELECT pg_stat)'
    ORDER BY total_exec_time DESC LIMIT 25"

  echo "### bytes an installation takes (heap, then indexes; $N installations)"
  psql "$PGURL" -P pager=off -c "
    SELECT relname AS table, pg_size_pretty(pg_table_size(c.oid)) AS heap, pg_size_pretty(pg_indexes_size(c.oid)) AS indexes,
      round(pg_table_size(c.oid)::numeric / $N) AS heap_per_installation, round(pg_indexes_size(c.oid)::numeric / $N) AS index_per_installation
    FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
    WHERE ns.nspname = 'public' AND c.relkind = 'r' AND pg_table_size(c.oid) > 1000000
    UNION ALL
    SELECT 'all', pg_size_pretty(sum(pg_table_size(c.oid))), pg_size_pretty(sum(pg_indexes_size(c.oid))),
      round(sum(pg_table_size(c.oid))::numeric / $N), round(sum(pg_indexes_size(c.oid))::numeric / $N)
    FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = 'public' AND c.relkind = 'r'
    ORDER BY 4 DESC"

  echo "### refresh churn: ${CHURN_SECONDS} s of callbacks at c=$CONNECTIONS, then what autovacuum faces"
  before=$(psql "$PGURL" -tAc "SELECT pg_table_size('registrations')")
  DURATION=$CHURN_SECONDS N=$N WORKLOAD=refresh SERVER_KEY=$SERVER_KEY run_wrk "scale-$N-churn" http://127.0.0.1:18090/ \
    -s "$BENCH_DIR/wrk/scale.lua" | sed "s/^scale-$N-//"
  psql "$PGURL" -P pager=off -c "
    SELECT relname, n_live_tup, n_dead_tup, round(100.0 * n_dead_tup / greatest(n_live_tup, 1), 1) AS dead_pct,
      n_tup_upd, n_tup_hot_upd, autovacuum_count, pg_size_pretty(pg_table_size(relid)) AS heap
    FROM pg_stat_user_tables WHERE relname IN ('registrations', 'installations', 'event_outbox', 'events', 'audit_pending', 'audit_log')
    ORDER BY relname"
  echo "registrations heap: $before → $(psql "$PGURL" -tAc "SELECT pg_table_size('registrations')") bytes"
  kill "$SERVICE_PID"; wait "$SERVICE_PID" 2>/dev/null || true
done
