#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz (built by `make fuzz-build` into BUILD_DIR).
#   run-fuzzers.sh BUILD_DIR --runs N        fuzz each harness for N executions (`make fuzz`)
#   run-fuzzers.sh BUILD_DIR --smoke N SECS  a short run each, at most N executions or SECS
#                                            seconds (`make fuzz-smoke`, part of `make test`)
# Each harness first replays its seed corpus and its regression inputs (tests/fuzz/regressions:
# every crash found so far) one by one, then fuzzes from the seeds; new inputs it finds go to
# BUILD_DIR/corpus/<harness> (kept between `make fuzz` runs; a smoke run starts afresh from the
# seeds, with a fixed seed, so that it is repeatable). Prints one line per harness: executions,
# exec/s, coverage (edges) and features, and whether it crashed; exits 1 if any harness did.
set -uo pipefail
cd "$(dirname "$0")/.."

# FUZZ_HARNESSES="a b" runs only those (e.g. to spread `make fuzz` over two processes).
ALL_HARNESSES=(completion_params http_session sse_parser bench_response jsonl_dataset
               sharegpt_dataset hardware_catalog gguf_metadata hf_config trace)
read -r -a HARNESSES <<<"${FUZZ_HARNESSES:-${ALL_HARNESSES[*]}}"

build_dir=$1
mode=$2
runs=$3
max_seconds=${4:-0}
fuzz_dir=tests/fuzz

dictionary_of() {
  case $1 in
    sse_parser) echo "$fuzz_dir/dict/bench_response.dict" ;;
    jsonl_dataset | sharegpt_dataset) echo "$fuzz_dir/dict/dataset.dict" ;;
    *) echo "$fuzz_dir/dict/$1.dict" ;;
  esac
}

# http_session's inputs reach ~15,000 coverage features each, and with libFuzzer's entropic
# schedule half its time went to that bookkeeping (perf: InputCorpus::UpdateFeatureFrequency,
# 48%); without it, it runs 2.2x as many inputs a second to the same coverage (BENCHMARKS.md).
extra_options_of() {
  case $1 in
    http_session) echo "-entropic=0" ;;
  esac
}

# libFuzzer's own last status line, e.g. "#1000000 DONE cov: 2101 ft: 6012 corp: 812/96Kb ...".
field() { grep -oE "$1: [0-9]+" <<<"$2" | tail -1 | grep -oE '[0-9]+$'; }

printf '%-20s %10s %8s %6s %7s %8s  %s\n' harness executions exec/s cov features seconds result
failed=0
for name in "${HARNESSES[@]}"; do
  harness="$build_dir/bin/${name}_fuzzer"
  seeds="$fuzz_dir/corpus/${name}_fuzzer"
  regressions="$fuzz_dir/regressions/${name}_fuzzer"
  log="$build_dir/logs/$name.log"
  artifacts="$build_dir/artifacts/$name/"
  work="$build_dir/corpus/$name"
  mkdir -p "$(dirname "$log")" "$artifacts"
  if [[ $mode == --smoke ]]; then rm -rf "$work"; fi
  mkdir -p "$work"

  # Replay: each input runs once, exactly as stored (fuzzing would cut inputs to -max_len).
  replay=("$seeds"/*)
  if [[ -d $regressions ]]; then replay+=("$regressions"/*); fi
  if ! "$harness" -artifact_prefix="$artifacts" "${replay[@]}" >"$log" 2>&1; then
    printf '%-20s %10s %8s %6s %7s %8s  %s\n' "$name" - - - - - "CRASHED replaying a stored input: $log"
    failed=1
    continue
  fi

  options=(-runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
           -dict="$(dictionary_of "$name")" -artifact_prefix="$artifacts" $(extra_options_of "$name"))
  if [[ $mode == --smoke ]]; then options+=(-seed=1 -max_total_time="$max_seconds"); fi
  started=$(date +%s.%N)
  "$harness" "${options[@]}" "$work" "$seeds" >>"$log" 2>&1
  status=$?
  seconds=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

  done_line=$(grep -E '^#[0-9]+' "$log" | tail -1)
  executions=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  executions=${executions:-$(grep -oE '^#[0-9]+' <<<"$done_line" | tr -d '#')}
  # Over the whole run, corpus loading included (libFuzzer's own figure is rounded to seconds).
  exec_per_second=$(awk -v n="${executions:-0}" -v s="$seconds" 'BEGIN { printf "%.0f", n / (s > 0 ? s : 1) }')
  result=ok
  if [[ $status -ne 0 ]]; then
    crash=$(grep -oE "Test unit written to .*" "$log" | tail -1 | sed 's/Test unit written to //')
    result="CRASHED (exit $status): ${crash:-see $log}"
    failed=1
  fi
  printf '%-20s %10s %8s %6s %7s %8s  %s\n' "$name" "${executions:-?}" "${exec_per_second:-?}" \
    "$(field cov "$done_line")" "$(field ft "$done_line")" "$seconds" "$result"
done
exit $failed
