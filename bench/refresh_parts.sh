#!/usr/bin/env bash
# What each step of a refresh callback costs PostgreSQL, measured alone: pgbench runs each part of the statement the
# service sends (bench/pgbench/parts/) and the whole of it (bench/pgbench/refresh_callback.sql) as transactions of
# their own, 16 clients, with synchronous_commit off for these sessions, so the WAL flush (which group commit shares
# among a batch) is left out and what remains is each step's execution. Prints PostgreSQL's CPU a transaction.
#   bash bench/refresh_parts.sh            DURATION=8
. "$(dirname "$0")/lib.sh"
build_release
start_postgres
start_service 18096 DB_POOL_SIZE=4
env DATABASE_URL="$PGURL" "$BIN" project create --id bench-proj --number 4242 >"$WORK/parts-project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform android >"$WORK/parts-app.json"
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/parts-app.json")
seed_callback_fids "$APP_ID"
echo "# $(git -C "$REPO" rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)," \
  "pgbench -c16 -j2 -M prepared -T $DURATION, synchronous_commit off"
printf '| %-24s | %10s | %18s |\n|---|---|---|\n' "statement" "tps" "PostgreSQL µs a txn"
for script in "$BENCH_DIR"/pgbench/parts/select_1.sql "$BENCH_DIR"/pgbench/parts/lock_installation.sql \
  "$BENCH_DIR"/pgbench/parts/outbox_event.sql "$BENCH_DIR"/pgbench/parts/update_hot.sql \
  "$BENCH_DIR"/pgbench/parts/update_new_token.sql "$BENCH_DIR"/pgbench/parts/refresh_without_audit.sql \
  "$BENCH_DIR"/pgbench/refresh_callback.sql; do
  before=$(postgres_ticks)
  out=$(PGOPTIONS="-c synchronous_commit=off" pgbench -n -c 16 -j 2 -T "$DURATION" -M prepared -f "$script" "$PGURL" 2>&1)
  after=$(postgres_ticks)
  n=$(awk '/number of transactions actually processed/ {split($6, a, "/"); print a[1]}' <<<"$out")
  tps=$(awk '/^tps/ {printf "%.0f", $3}' <<<"$out")
  printf '| %-24s | %10s | %18s |\n' "$(basename "$script" .sql)" "$tps" \
    "$(( (after - before) * 1000000000 / $(getconf CLK_TCK) / n / 1000 ))"
done
