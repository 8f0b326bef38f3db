#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (parsers instrumented with -sanitize=fuzzer,address) and runs each for a
# bounded time, starting from its committed seed corpus (fuzz/corpus/<target>; new inputs go to a scratch directory).
# A crash, a failed invariant, an address-sanitizer report, a leak or a >5 s input fails the run and leaves the input
# in .build/fuzz-artifacts/.
# Usage: scripts/fuzz.sh [seconds per target (default 30)] [target…]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/swift-env.sh
# A failed precondition is reported by libFuzzer; the Swift runtime's backtracer would trip the address sanitizer.
export SWIFT_BACKTRACE=enable=no
seconds=${1:-30}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(FuzzHTTP FuzzJSON FuzzCondition FuzzJWT FuzzSignature FuzzAssertion FuzzForm FuzzProtobuf)
# SwiftPM renames `main`; lld (in the toolchain) links libFuzzer where the system's gold gives up.
artifacts=.build/fuzz-artifacts
mkdir -p "$artifacts"
build() {
  swift build --package-path fuzz --scratch-path .build/fuzz -Xswiftc -sanitize=fuzzer,address \
    -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld >"$artifacts/build.log" 2>&1
}
# An incremental build can keep the parent package's old file list (a source file added since is not seen): once
# more from scratch before giving up.
if ! build && ! { rm -rf .build/fuzz && build; }; then
  grep -E "error" "$artifacts/build.log" | sort -u | head -20 >&2
  echo "the fuzz targets did not build (log: $artifacts/build.log)" >&2
  exit 1
fi
bin=.build/fuzz/debug
printf '%-14s %12s %10s %8s %8s\n' target runs "runs/s" corpus crashes
status=0
for target in "${targets[@]}"; do
  [ -x "$bin/$target" ] || { echo "$target did not build" >&2; exit 1; }
  name=$(echo "${target#Fuzz}" | tr '[:upper:]' '[:lower:]')
  scratch=$(mktemp -d)
  log="$artifacts/$target.log"
  rc=0
  "$bin/$target" "$scratch" "fuzz/corpus/$name" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=4096 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$artifacts/$target-" >"$log" 2>&1 || rc=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  crashes=0
  if [ "$rc" != 0 ]; then
    crashes=1
    status=1
    echo "$target FAILED (exit $rc); the input is in $artifacts/, the log in $log:" >&2
    grep -E "ERROR|Fatal error|precondition|SUMMARY|Test unit written" "$log" | head -10 >&2
  fi
  corpus=$(( $(ls "$scratch" | wc -l) + $(ls "fuzz/corpus/$name" | wc -l) ))
  printf '%-14s %12s %10s %8s %8s\n' "$target" "$runs" "$rate" "$corpus" "$crashes"
  rm -rf "$scratch"
done
exit $status
