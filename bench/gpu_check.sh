#!/usr/bin/env bash
# One pass of brisk's GPU checks, for a machine lent for a few minutes (see BENCHMARKS.md):
#   1. random-weight GGUFs of Llama-3.2-1B and Llama-3.1-8B shapes (F16; speed does not depend
#      on the weights' values),
#   2. `brisk plan calibrate` on the GPU with both models,
#   3. `brisk plan` predictions (calibrated and with default efficiencies) for the loads of 4.,
#   4. `brisk serve` on the 8B model measured by `brisk bench`: one stream, 8 users, and a burst
#      of 10 ShareGPT-sized requests (the LambdaLabs vLLM comparison's shape),
#   5. output throughput at four sampling settings, against llama-server when it is in BIN_DIR,
#   6. two models pinned to GPU 0 under a memory budget that holds one: loads on demand.
# Usage: bench/gpu_check.sh BIN_DIR VOCAB_GGUF OUT_DIR
set -uo pipefail
BIN=$1
VOCAB=$2
OUT=$3
MODELS=${MODELS_DIR:-/tmp/brisk-models}
export BRISK_HOME=${BRISK_HOME:-/tmp/brisk-home}
mkdir -p "$OUT" "$MODELS" "$BRISK_HOME"
BRISK="$BIN/brisk"
step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; }

step machine
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
nproc; grep -m1 'model name' /proc/cpuinfo

step models
# SHAPE_ARGS (e.g. "--layers 2") shrinks both models for a dry run of this script on a CPU.
"$BIN/random-gguf" --shape llama-3.2-1b --type f16 --vocab "$VOCAB" ${SHAPE_ARGS:-} \
  --out "$MODELS/llama-3.2-1b-f16.gguf" | tail -1 || exit 1
"$BIN/random-gguf" --shape llama-3.1-8b --type f16 --vocab "$VOCAB" ${SHAPE_ARGS:-} \
  --out "$MODELS/llama-3.1-8b-f16.gguf" | tail -1 || exit 1
ls -la "$MODELS"
M1="$MODELS/llama-3.2-1b-f16.gguf"
M8="$MODELS/llama-3.1-8b-f16.gguf"

step calibrate
"$BRISK" plan calibrate --model "$M1" --model "$M8" --device "${DEVICE_ID:-h200}" --gpu-layers 999 \
  --batches ${BATCHES:-1,4,16,64} --context 512 --repeats ${REPEATS:-7} 2>&1 | grep -v '^\[' | tee "$OUT/calibrate.txt"
cp "$BRISK_HOME/calibration.json" "$OUT/" 2>/dev/null

step predictions
for spec in "1 512 128" "8 512 128" "10 137 187"; do
  set -- $spec
  for mode in calibrated uncalibrated; do
    flag=""; [[ $mode == uncalibrated ]] && flag="--uncalibrated"
    "$BRISK" plan --model "$M8" --devices "${DEVICE_ID:-h200}",h100-sxm,a100-80gb --concurrency "$1" --burst \
      --isl "$2" --osl "$3" $flag --json > "$OUT/plan_c$1_$mode.json"
  done
done
"$BRISK" plan --model "$M8" --devices "${DEVICE_ID:-h200}" --concurrency 8 --burst --isl 512 --osl 128 --explain "${DEVICE_ID:-h200}" \
  > "$OUT/plan_explain.txt" 2>&1

step serve
"$BRISK" serve --model "$M8" --port 8090 --max-seqs 16 --ctx-size 16384 > "$OUT/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 120); do curl -sf localhost:8090/health >/dev/null && break; sleep 1; done
bench() {  # name concurrency requests isl osl
  "$BRISK" bench --url http://127.0.0.1:8090 --concurrency "$2" --num-requests "$3" \
    --warmup-requests 2 --input-tokens "$4" --output-tokens "$5" --out "$OUT/$1" 2>&1 | tail -15
}
step bench c1; bench bench_c1 1 8 512 128
step bench c8; bench bench_c8 8 16 512 128
step bench c10; bench bench_c10 10 10 137 187
curl -s localhost:8090/metrics | grep -E '^brisk_(step|time_per)' | head -20 > "$OUT/metrics.txt"
kill -INT $SERVER; wait $SERVER

# 5. Sampling (issue 8): 16 streams, 128 in / 128 out, at the four settings clients send, on the
#    8B shape (128k vocabulary); each server started fresh per setting. llama-server runs too when
#    its CUDA build is in BIN_DIR. Where a step's time goes comes from brisk_step_phase_seconds.
declare -A SAMPLING=(
  [nothing]=""
  [greedy]="--temperature 0"
  [full]="--temperature 1 --top-k 0 --top-p 1 --min-p 0"
  [llama]="--temperature 0.8 --top-k 40 --top-p 0.95 --min-p 0.05"
)
for setting in nothing greedy full llama; do
  for server in brisk llama-server; do
    if [[ $server == brisk ]]; then
      "$BRISK" serve --model "$M8" --port 8091 --max-seqs 16 --ctx-size 8192 > "$OUT/sampling_$setting.log" 2>&1 &
    else
      [[ -x "$BIN/llama-server" ]] || continue
      "$BIN/llama-server" -m "$M8" --port 8091 -np 16 -c 8192 --kv-unified -ngl 999 > "$OUT/sampling_${setting}_llama.log" 2>&1 &
    fi
    PID=$!
    for _ in $(seq 1 120); do curl -sf localhost:8091/health >/dev/null && break; sleep 1; done
    step "sampling $setting $server"
    "$BRISK" bench --url http://127.0.0.1:8091 --concurrency 16 --num-requests 64 --warmup-requests 16 \
      --input-tokens 128 --output-tokens 128 ${SAMPLING[$setting]} --out "$OUT/sampling_${setting}_$server" 2>&1 | tail -2
    [[ $server == brisk ]] && curl -s localhost:8091/metrics | grep -E '^brisk_step_phase_seconds_sum' > "$OUT/sampling_${setting}_phases.txt"
    kill -INT $PID; wait $PID
  done
done
# 6. Several models on the GPU (issue 22): both pinned to GPU 0 (--device) with a budget that
#    holds the 1B model or the 8B one, not both: the 8B loads on its first request (unloading the
#    1B), then the 1B on its own; each answer's brisk_timings.model_load_ms is the load it waited.
step "several models: --device 0, load on demand"
printf '[[model]]\nmodel = "%s"\ndevice = 0\n\n[[model]]\nmodel = "%s"\ndevice = 0\n' "$M1" "$M8" > "$OUT/models.toml"
"$BRISK" serve --models "$OUT/models.toml" --port 8092 --ctx-size 8192 --memory-budget "${BUDGET:-19GiB}" \
  > "$OUT/several.log" 2>&1 &
PID=$!
for _ in $(seq 1 120); do curl -sf localhost:8092/health >/dev/null && break; sleep 1; done
curl -s localhost:8092/v1/models > "$OUT/several_models_before.json"
for model in llama-3.1-8b-f16 llama-3.2-1b-f16 llama-3.1-8b-f16; do
  curl -s localhost:8092/v1/completions -d "{\"model\": \"$model\", \"prompt\": \"Hello\", \"max_tokens\": 16}" \
    | tee -a "$OUT/several_answers.jsonl"; echo >> "$OUT/several_answers.jsonl"
done
curl -s localhost:8092/metrics | grep -E '^brisk_(model|memory)_' > "$OUT/several_metrics.txt"
nvidia-smi --query-gpu=index,memory.used --format=csv >> "$OUT/several_metrics.txt"
kill -INT $PID; wait $PID
step done
