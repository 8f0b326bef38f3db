#!/usr/bin/env bash
# Streaming a 1,000,000-member topic on realistic data (the K2 shape): random FIDs, 152-character tokens, 10 % of the
# members stale (refreshed 31-200 days ago: still targeted), 1 % decoys (subscribed but not targeted: half with
# messaging consent withdrawn, half expired, refreshed 300 days ago), among 1,100,000 installations (the rest on other
# topics, their FIDs interleaved with the members'). Both routes, three times each, page size 10,000; the service's
# and PostgreSQL's CPU over each stream.
#   bash bench/topic_stream.sh            MEMBERS=1000000 ROUNDS=3
. "$(dirname "$0")/lib.sh"
MEMBERS=${MEMBERS:-1000000}
ROUNDS=${ROUNDS:-3}
build_release
start_postgres
start_service 18080 DB_POOL_SIZE=16
env DATABASE_URL="$PGURL" "$BIN" project create --id bench-proj --number 4242 >"$WORK/project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform android >"$WORK/app.json"
SERVER_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serverKey"])' "$WORK/project.json")
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/app.json")
TOTAL=$((MEMBERS + MEMBERS / 10))
started=$(date +%s)
psql "$PGURL" -q -v ON_ERROR_STOP=1 <<SQL
-- n's FID: 22 characters of base64url from its md5, so FID order is a random order of n.
CREATE TEMP TABLE seed AS
  SELECT n, translate(left(encode(decode(md5('k2-' || n), 'hex'), 'base64'), 22), '+/', '-_') AS fid,
    CASE WHEN n % 100 = 7 THEN 'withdrawn' WHEN n % 100 = 57 THEN 'expired' WHEN n % 10 = 3 THEN 'stale' ELSE 'fresh' END
      AS kind
  FROM generate_series(1, $TOTAL) AS n;
INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
  SELECT 'bench-proj', fid, '$APP_ID', '\x00', now() - interval '300 days', now() FROM seed;
INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
  SELECT 'bench-proj', fid, 'messaging', kind <> 'withdrawn', 'default', now() FROM seed;
-- An FCM token is 152 characters here: the FID, ':APA91b' and base64 of md5s.
INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
  SELECT 'bench-proj', fid,
    left(fid || ':APA91b' || translate(encode(decode(md5(fid) || md5(fid || 'a') || md5(fid || 'b') || md5(fid || 'c')
      || md5(fid || 'd') || md5(fid || 'e') || md5(fid || 'f') || md5(fid || 'g'), 'hex'), 'base64'), E'+/=\n', '-_'),
      152),
    'android', now() - interval '300 days',
    CASE kind WHEN 'expired' THEN now() - interval '300 days'
      WHEN 'stale' THEN now() - (31 + n % 170) * interval '1 day' ELSE now() - (n % 30) * interval '1 day' END
  FROM seed;
INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
  SELECT 'bench-proj', fid, CASE WHEN n <= $MEMBERS THEN 'big' ELSE 'other' || n % 7 END, now() FROM seed;
VACUUM ANALYZE;
SQL
expected=$(python3 -c "m=$MEMBERS; print(m - sum(1 for n in range(1, m + 1) if n % 100 in (7, 57)))")
echo "# seeded $TOTAL installations, $MEMBERS subscribed to 'big' ($expected targeted) in $(( $(date +%s) - started )) s"
echo "# $(git -C "$REPO" rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) x $(nproc)"
PG=$(head -1 "$WORK/pg/data/postmaster.pid")
tree_ticks() {  # utime+stime (and reaped children's) of a process tree
  local total=0 pid
  for pid in $1 $(pgrep -P "$1"); do
    total=$(( total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
  done
  echo "$total"
}
for route in topic condition; do
  for _ in $(seq 1 "$ROUNDS"); do
    s0=$(tree_ticks "$SERVICE_PID"); p0=$(tree_ticks "$PG")
    python3 "$BENCH_DIR/stream_targets.py" 18080 bench-proj big "$SERVER_KEY" "$expected" "$route"
    s1=$(tree_ticks "$SERVICE_PID"); p1=$(tree_ticks "$PG")
    echo "  CPU: service $(( (s1 - s0) * 1000 / $(getconf CLK_TCK) )) ms, PostgreSQL $(( (p1 - p0) * 1000 / $(getconf CLK_TCK) )) ms"
  done
done
