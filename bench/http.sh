#!/usr/bin/env bash
# HTTP layer against the machine's ceiling: the same wrk command (keep-alive, c=64) against nginx `return 200`
# and the service's GET /healthz, interleaved, then 10,000 idle keep-alive connections held open while RSS is
# read and a new client is served.
#   bash bench/http.sh            DURATION=10 CONNECTIONS=64 PASSES=2 by default
. "$(dirname "$0")/lib.sh"
PASSES=${PASSES:-2}
build_release
start_postgres
start_nginx 18081
start_service 18080
echo "# HTTP: wrk -t2 -c$CONNECTIONS -d${DURATION}s, keep-alive"
echo "name rps p50_ms p99_ms errors"
for pass in $(seq 1 "$PASSES"); do
  run_wrk "nginx-$pass" http://127.0.0.1:18081/
  run_wrk "healthz-$pass" http://127.0.0.1:18080/healthz
done
python3 - "$WORK" "$PASSES" <<'PY'
import sys
work, passes = sys.argv[1], int(sys.argv[2])
def best(prefix):
    rows = [open(f"{work}/{prefix}-{p}.wrk").read() for p in range(1, passes + 1)]
    import re
    return max(float(re.search(r"Requests/sec:\s+([\d.]+)", r).group(1)) for r in rows)
n, s = best("nginx"), best("healthz")
print(f"ratio service/nginx (best pass each): {s / n:.2f}  ({s:.0f} / {n:.0f} req/s)")
PY

echo "# 10,000 idle keep-alive connections"
before=$(rss_kib "$SERVICE_PID")
python3 "$(dirname "$0")/idle_connections.py" 18080 10000 "$SERVICE_PID"
echo "service RSS before: $((before / 1024)) MiB"
