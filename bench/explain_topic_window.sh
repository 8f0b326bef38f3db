#!/usr/bin/env bash
# EXPLAIN (ANALYZE) of one topic-page window (10,001 subscribers) on a 1,000,000-subscriber topic and on a sparse
# (1 %) one, at three positions: the window, the span count, and the join as the planner picks it and as a forced
# merge. The figures of the windowed topic pages tried and dropped on 2026-12-01 (docs/benchmarks.md).
#   VAC="VACUUM ANALYZE" bash bench/explain_topic_window.sh
. "$(dirname "$0")/lib.sh"
build_release >/dev/null 2>&1
start_postgres
start_service 18080
env DATABASE_URL="$PGURL" "$BIN" project create --id bench-proj --number 4242 >"$WORK/project.json"
env DATABASE_URL="$PGURL" "$BIN" app create --project bench-proj --platform android >"$WORK/app.json"
APP_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["appId"])' "$WORK/app.json")
psql "$PGURL" -q <<SQL
INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
  SELECT 'bench-proj', 'f' || lpad(n::text, 21, '0'), '$APP_ID', '\x00', now(), now() FROM generate_series(1, 1001000) AS n;
INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
  SELECT 'bench-proj', fid, 'messaging', true, 'default', now() FROM installations WHERE project_id = 'bench-proj';
INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
  SELECT 'bench-proj', fid, fid || ':seed', 'android', now(), now() FROM installations WHERE project_id = 'bench-proj';
INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
  SELECT 'bench-proj', 'f' || lpad(n::text, 21, '0'), 'big', now() FROM generate_series(1001, 1001000) AS n;
INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
  SELECT 'bench-proj', 'f' || lpad(n::text, 21, '0'), 'sparse', now() FROM generate_series(1001, 1001000, 100) AS n;
${VAC:-ANALYZE};
SQL
Q="SELECT r.fid, r.token, r.platform, r.refreshed_at FROM topic_subscriptions ts
JOIN registrations r ON r.project_id = ts.project_id AND r.fid = ts.fid
JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND c.purpose = 'messaging' AND c.granted
WHERE ts.project_id = 'bench-proj' AND ts.topic = \$1 AND ts.fid > \$2 AND r.fid > \$2 AND c.fid > \$2
  AND ts.fid <= \$3 AND r.fid <= \$3 AND c.fid <= \$3
  AND r.state = 'active' AND r.refreshed_at > now() - interval '270 days' ORDER BY ts.fid LIMIT 10001"
for topic in big sparse; do
for n in 100000 500000 950000; do
after=$(printf 'f%021d' $n)
upper=$(psql "$PGURL" -qAt -c "SELECT max(fid) FROM (SELECT fid FROM topic_subscriptions WHERE project_id='bench-proj' AND topic='$topic' AND fid > '$after' ORDER BY fid LIMIT 10001) s")
echo "== $topic $after..$upper"
psql "$PGURL" -qAt -c "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) SELECT max(fid), count(*) FROM (SELECT fid FROM topic_subscriptions WHERE project_id='bench-proj' AND topic='$topic' AND fid > '$after' ORDER BY fid LIMIT 10001) s" | grep -E "Execution|Scan" | tr '\n' ' '; echo " [window]"
psql "$PGURL" -qAt -c "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) SELECT count(*) FROM (SELECT 1 FROM registrations r WHERE project_id='bench-proj' AND fid > '$after' AND fid <= '$upper' LIMIT 20002) s" | grep -E "Execution|Scan" | tr '\n' ' '; echo " [span]"
psql "$PGURL" -qAt -c "PREPARE p(text,text,text) AS $Q" -c "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) EXECUTE p('$topic','$after','$upper')" | grep -E "Execution|Join|Loop" | tr '\n' ' '; echo " [plain]"
psql "$PGURL" -qAt -c "SET enable_nestloop=off" -c "SET enable_hashjoin=off" -c "PREPARE p(text,text,text) AS $Q" -c "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) EXECUTE p('$topic','$after','$upper')" | grep -E "Execution|Join|Loop" | tr '\n' ' '; echo " [forced]"
done; done
