#!/usr/bin/env bash
# Starts the service on $PORT (default 8080). Without DATABASE_URL it creates and runs a private PostgreSQL
# under ./.data/postgres (the Debian server binaries are installed if missing) and stops it on exit. As root, when
# the postgres user cannot reach the checkout (a private home), the cluster lives under /var/lib/token-registry/ and
# the service says where; a cluster left running by a killed service is adopted and stopped on the next exit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
. scripts/swift-env.sh
swift build -c release --product token-registry >&2
exec .build/release/token-registry serve "$@"
