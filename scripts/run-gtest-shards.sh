#!/usr/bin/env bash
# Runs each GoogleTest binary given as JOBS shards of its tests in parallel processes
# (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), and fails if any shard fails, printing that shard's
# output. Usage: run-gtest-shards.sh JOBS BINARY...
#
# Under ASan+UBSan a process costs ~0.2 s to start with brisk's unit-test binary; ctest starts one
# per test (341 of them), which was half of `make sanitize-unit`'s time (BENCHMARKS.md, "Cutting
# the warm run"). Shards start JOBS processes per binary; every test still runs, and a leak
# anywhere still fails its shard at exit.
set -uo pipefail

jobs="${1:?usage: run-gtest-shards.sh JOBS BINARY...}"
shift
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "JOBS must be a positive integer, got '$jobs'" >&2; exit 2; }
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

# Every binary's shards start at once (binaries of very different lengths then share the cores
# instead of running one after the other), and are reported in order.
names=()
pids=()
for binary in "$@"; do
  name="$(basename "$binary")"
  for ((shard = 0; shard < jobs; shard++)); do
    GTEST_TOTAL_SHARDS="$jobs" GTEST_SHARD_INDEX="$shard" "$binary" --gtest_brief=1 \
      >"$logs/$name.$shard.log" 2>&1 &
    pids+=($!)
    names+=("$name $shard")
  done
done
status=0
for i in "${!pids[@]}"; do
  read -r name shard <<<"${names[$i]}"
  if wait "${pids[$i]}"; then
    summary="$(grep -E '^\[==========\] .* ran' "$logs/$name.$shard.log" | tail -n 1)"
    echo "$name shard $((shard + 1))/$jobs: ok ${summary#\[==========\] }"
  else
    code=$?
    status=1
    echo "$name shard $((shard + 1))/$jobs: FAILED (exit code $code); its output:"
    cat "$logs/$name.$shard.log"
  fi
done
exit "$status"
