#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, starts a throwaway PostgreSQL, runs the Swift tests
# (unit, property, live-server) and the conformance tests with the real Firebase Python clients, then stops.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
. scripts/swift-env.sh
eval "$(scripts/pg-test-cluster.sh start)"
trap 'scripts/pg-test-cluster.sh stop' EXIT
swift build
swift build --build-tests
swift test
if [ -x conformance/run.sh ]; then conformance/run.sh; fi
