#!/usr/bin/env bash
# brisk doctor against embedding servers configured to show one problem each (BENCHMARKS.md,
# "brisk doctor on embedding endpoints"): brisk serve's defaults, a 20 ms batching window,
# batches of one input (--max-batch-tokens 96), and llama-server --embeddings with 1 and 8 slots.
# Each server is started fresh on all-MiniLM-L6-v2, probed for at most BUDGET, and stopped.
# Usage: bench/doctor_embeddings.sh OUT_DIR [BUDGET]   (about a minute in all on the 2-vCPU VM)
set -euo pipefail
out=${1:?usage: bench/doctor_embeddings.sh OUT_DIR [BUDGET]}
budget=${2:-30s}
cd "$(dirname "$0")/.."
brisk=build/bin/brisk
model_file=${BRISK_HOME:-$HOME/.cache/brisk}/models/all-MiniLM-L6-v2-f16.gguf
threads=${THREADS:-$(nproc)}
port=${PORT:-18590}
mkdir -p "$out"
{ date -u +%FT%TZ; uname -a; nproc; git rev-parse HEAD; } > "$out/machine.txt"

wait_ready() {
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port$1" > /dev/null && return 0
    sleep 0.5
  done
  echo "server on $port never became ready" >&2
  return 1
}

probe() {  # NAME READY_PATH DOCTOR_FLAGS... -- SERVER_ARGV...
  local name=$1 ready=$2
  shift 2
  local doctor=()
  while [[ $1 != -- ]]; do doctor+=("$1"); shift; done
  shift
  "$@" > "$out/$name.server.log" 2>&1 &
  local pid=$!
  wait_ready "$ready"
  "$brisk" doctor --url "http://127.0.0.1:$port" --budget "$budget" --max-concurrency 16 \
    --progress off --out "$out/$name" "${doctor[@]}" > /dev/null 2> "$out/$name.doctor.log"
  kill "$pid"
  wait "$pid" 2> /dev/null || true
  python3 - "$out/$name/report.json" "$name" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
ramp = report["measurements"]["probe"]["embeddings"]["ramp"]
batch = [p["batcher"]["inputs_per_batch"] if p["batcher"] else None for p in ramp]
print(f"{sys.argv[2]:<22} {report['verdict']['primary_cause']:<22} "
      f"findings={[f['id'] for f in report['findings']]} "
      f"inputs/s={[round(p['inputs_per_s'], 1) for p in ramp]} "
      f"p50_ms={[round(p['latency_ms']['p50'], 1) for p in ramp]} inputs_per_batch={batch}")
PY
}

serve=("$brisk" serve --model all-minilm-l6-v2 --host 127.0.0.1 --port "$port" --threads "$threads")
llama=(build/bin/llama-server -m "$model_file" --embeddings --metrics --host 127.0.0.1
       --port "$port" -t "$threads" -c 4096)
probe brisk-defaults /ready -- "${serve[@]}"
probe brisk-window-20ms /ready -- "${serve[@]}" --batch-window-ms 20
probe brisk-batch-tokens-96 /ready -- "${serve[@]}" --max-batch-tokens 96
probe llama-server-np1 /health --endpoint embeddings -- "${llama[@]}" -np 1
probe llama-server-np8 /health --endpoint embeddings -- "${llama[@]}" -np 8
