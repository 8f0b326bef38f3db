#!/usr/bin/env bash
# Conformance suite: the real Firebase Python clients (pinned in requirements.txt) against a live service.
# Needs TEST_DATABASE_URL (scripts/test.sh sets it) and a debug build of token-registry.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.build/conformance-venv
if [ ! -x "$VENV/bin/pytest" ] || ! cmp -s conformance/requirements.txt "$VENV/requirements.txt"; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r conformance/requirements.txt
  cp conformance/requirements.txt "$VENV/requirements.txt"
fi
DB="conformance_$$"
psql "$TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
export DATABASE_URL="${TEST_DATABASE_URL/dbname=postgres/dbname=$DB}"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
LOG=$(mktemp)
# Every request comes from 127.0.0.1: the per-address limit of unauthenticated check-ins would throttle the generated
# cases and the clients alike.
PORT=$PORT HOST=127.0.0.1 LOG_LEVEL=warning RATE_LIMIT_CHECKIN_PER_ADDRESS=100000 .build/debug/token-registry serve >"$LOG" 2>&1 &
SERVICE=$!
cleanup() {
  kill "$SERVICE" 2>/dev/null || true
  wait "$SERVICE" 2>/dev/null || true
  psql "$TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
export TR_BASE="http://127.0.0.1:$PORT" TR_BIN="$PWD/.build/debug/token-registry"
# Schemathesis against the live service and openapi.yaml: every check, bounded examples, a fixed seed so CI is
# repeatable. Zero 5xx and zero responses that contradict the document, or the run fails.
SERVER_KEY=$("$PWD/.build/debug/token-registry" project create --id schemathesis-proj --number 5150 | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverKey"])')
(cd "$(mktemp -d)" && "$OLDPWD/$VENV/bin/schemathesis" --config-file "$OLDPWD/conformance/schemathesis.toml" run "$OLDPWD/openapi.yaml" --url "$TR_BASE" \
  --header "Authorization: Bearer $SERVER_KEY" --max-examples 15 --seed 20261129 --no-color) >"$LOG.schemathesis" 2>&1 \
  || { tail -n 80 "$LOG.schemathesis"; echo "schemathesis: 0 passed, 1 failed"; exit 1; }
grep -E "generated|passed|failures" "$LOG.schemathesis" | tail -n 3
"$VENV/bin/pytest" -q conformance "$@"
