#!/usr/bin/env bash
# Imports ROWS (default 1,000,000) OneSignal CSV rows (the csv_export columns: 60 % Android FCM tokens, 30 % iOS APNs
# tokens, 10 % web push; 5 % unsubscribed, a third with an external user ID, tags on half) into an empty project, then
# the same file again (which must change nothing), then exports the project and imports the export into a second
# database. Prints rows a second of each, and the project's table sizes. fsync and synchronous commit on.
#   bash bench/import.sh                   ROWS=1000000 FIRST_ONLY=0
# FIRST_ONLY=1 stops after the first import (the rest takes as long again, twice over).
. "$(dirname "$0")/lib.sh"
ROWS=${ROWS:-1000000}
build_release
start_postgres
export SECRETS_KEY=${SECRETS_KEY:-$(head -c 32 /dev/urandom | base64)}
CSV=$WORK/onesignal-$ROWS.csv
if [ ! -s "$CSV" ]; then
  python3 "$BENCH_DIR/onesignal_csv.py" "$ROWS" "$CSV"
fi
setup() {
  env DATABASE_URL="$1" "$BIN" project create --id bench-import --number 4343 >/dev/null
  for p in android ios web; do
    env DATABASE_URL="$1" "$BIN" app create --project bench-import --platform $p --bundle-id com.example --app-id "1:4343:$p:00aa11" >/dev/null
  done
}
setup "$PGURL"
# timed OUT COMMAND…: runs COMMAND with its output in OUT; prints the seconds it took.
timed() { local out=$1 start end; shift; start=$(date +%s.%N); "$@" >"$out" 2>/dev/null; end=$(date +%s.%N); echo "$start $end" | awk '{printf "%.1f", $2 - $1}'; }
echo "# import of $ROWS OneSignal rows ($(du -h "$CSV" | cut -f1)), batches of 5000, fsync on"
t=$(timed "$WORK/import1.json" env DATABASE_URL="$PGURL" "$BIN" import --project bench-import --format onesignal-csv "$CSV")
echo "first import: ${t} s = $(awk -v n="$ROWS" -v t="$t" 'BEGIN {printf "%.0f", n / t}') rows/s; $(cat "$WORK/import1.json")"
psql "$PGURL" -Atc "SELECT 'size ' || relname || ' ' || pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class WHERE relname IN ('installations','registrations','consents','consent_events','topic_subscriptions','user_bindings','user_binding_history') ORDER BY 1"
[ "${FIRST_ONLY:-0}" = 1 ] && exit 0
t=$(timed "$WORK/import2.json" env DATABASE_URL="$PGURL" "$BIN" import --project bench-import --format onesignal-csv "$CSV")
echo "same file again: ${t} s; $(cat "$WORK/import2.json")"
t=$(timed "$WORK/export.jsonl" env DATABASE_URL="$PGURL" "$BIN" export --project bench-import)
echo "export: ${t} s, $(wc -l < "$WORK/export.jsonl") lines, $(du -h "$WORK/export.jsonl" | cut -f1)"
psql "$TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS bench2 WITH (FORCE)" -c "CREATE DATABASE bench2" >/dev/null
URL2="host=$WORK/pg port=${BENCH_PG_PORT:-55433} dbname=bench2 user=postgres"
setup "$URL2"
t=$(timed "$WORK/import3.json" env DATABASE_URL="$URL2" "$BIN" import --project bench-import --format registry "$WORK/export.jsonl")
echo "import of the export: ${t} s; $(cat "$WORK/import3.json")"
DATABASE_URL="$URL2" "$BIN" export --project bench-import > "$WORK/export2.jsonl"
cmp -s "$WORK/export.jsonl" "$WORK/export2.jsonl" && echo "round trip: the same lines" || echo "round trip: lines differ"
psql "$PGURL" -Atc "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class WHERE relname IN ('installations','registrations','consents','consent_events','topic_subscriptions','user_bindings') ORDER BY 1" | sed 's/^/size /'
