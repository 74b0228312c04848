#!/usr/bin/env bash
# brisk tune's benchmarks (BENCHMARKS.md, "brisk tune"), about 40 minutes on the 2-vCPU VM:
#  1. brisk tune on brisk serve, a mixed long/short workload, SLO stated up front, 20-minute budget;
#  2. the tuned and the default configuration re-measured in a fresh run (tune --verify with the
#     winner's flags as the one prescription, so both are measured in full, interleaved);
#  3. the same search on llama-server through --server-cmd (its defaults first: 4 slots, ubatch 512).
# Usage: bench/tune_benchmarks.sh OUT_DIR [BUDGET]   (BUDGET of 1: 20m; REMEASURE_BUDGET of 2:
# 8m, REMEASURE_REPEATS its confirmation repeats: 2; LLAMA_BUDGET of 3: 10m, 0 to skip it;
# SLO, INPUT_TOKENS: the workload's)
set -euo pipefail
out=${1:?usage: bench/tune_benchmarks.sh OUT_DIR [BUDGET]}
budget=${2:-20m}
cd "$(dirname "$0")/.."
brisk=build/bin/brisk
model=smollm2-135m
model_file=${BRISK_HOME:-$HOME/.cache/brisk}/models/SmolLM2-135M-Instruct.Q4_1.gguf
slo=${SLO:-ttft_p99=8s,tpot_p99=200ms}
# Trials hold what the SLO's percentile needs (100 requests for a p99).
workload=(--input-tokens "${INPUT_TOKENS:-uniform:32:768}" --output-tokens 32)
# THREADS=1 when another job holds a core: two ggml threads on one shared core spin at barriers.
threads=${THREADS:-$(nproc)}
mkdir -p "$out"
{ date -u +%FT%TZ; uname -a; nproc; git rev-parse HEAD; } > "$out/machine.txt"

"$brisk" tune --model "$model" --slo "$slo" --budget "$budget" "${workload[@]}" \
  --base-flags "--threads $threads" --progress off --out "$out/brisk" 2> "$out/brisk.log"

# The winner's knob flags as a doctor-style prescription: --verify measures both in full.
python3 - "$out" <<'PY'
import json, shlex, sys
out = sys.argv[1]
report = json.load(open(f"{out}/brisk/report.json"))
best, base = report["best"]["command"], report["baseline"]["command"]
flags = shlex.split(best)[2:]  # after "brisk serve"
json.dump({"findings": [{"id": "tuned", "serve_flags": flags}]}, open(f"{out}/winner.json", "w"))
print("winner:", best, "\nbaseline:", base)
PY
"$brisk" tune --model "$model" --slo "$slo" --budget "${REMEASURE_BUDGET:-8m}" "${workload[@]}" \
  --base-flags "--threads $threads" --verify "$out/winner.json" --confirm-top 1 --confirm-repeats "${REMEASURE_REPEATS:-2}" --progress off \
  --out "$out/remeasure" 2> "$out/remeasure.log"

[[ ${LLAMA_BUDGET:-10m} == 0 ]] && exit 0  # LLAMA_BUDGET=0: parts 1 and 2 only
"$brisk" tune --server-cmd "build/bin/llama-server -m {model} --port {port} -t $threads -np {slots} -ub {ubatch}" \
  --grid slots=4,1,2,8,16 --grid ubatch=512,128,256 --model "$model_file" --slo "$slo" \
  --budget "${LLAMA_BUDGET:-10m}" "${workload[@]}" --progress off --out "$out/llama-server" 2> "$out/llama-server.log"
