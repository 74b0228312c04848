#!/usr/bin/env bash
# What the prefix cache's host tier costs when nothing is reused (issue 21: "the host tier saves
# every evicted sequence, even one never reused"). brisk serve with its defaults (the host tier
# on, --cache-ram's default) against --cache-ram 0, taking turns, each started fresh per run:
# brisk bench at 64 concurrent streams of unique prompts (uniform 32-512 tokens; every prompt
# starts with its own id, so no prefix is ever reused) and 32 output tokens; both servers admit
# every request (--max-queue-delay-ms 600000), so that both compute the same work. Reported per run:
# output tok/s, TTFT and TPOT p50/p99, and from /metrics the saves, their bytes and the engine
# thread's time spent saving (brisk_prefix_cache_host_save_seconds_total), against the run's wall.
# Usage: bench/host_save_cost.sh OUT_DIR [ROUNDS]   (about 2.5 minutes a run on the 2-vCPU VM)
set -euo pipefail
out=${1:?usage: bench/host_save_cost.sh OUT_DIR [ROUNDS]}
rounds=${2:-2}
cd "$(dirname "$0")/.."
brisk=build/bin/brisk
threads=${THREADS:-$(nproc)}
port=${PORT:-18595}
mkdir -p "$out"
{ date -u +%FT%TZ; uname -a; nproc; git rev-parse HEAD; } > "$out/machine.txt"

wait_ready() {
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/ready" > /dev/null && return 0
    sleep 0.5
  done
  echo "server on $port never became ready" >&2
  return 1
}

run() {  # LABEL SERVE_FLAGS...
  local label=$1
  shift
  "$brisk" serve --model gemma3-270m --host 127.0.0.1 --port "$port" --threads "$threads" \
    --max-queue-delay-ms 600000 "$@" \
    > "$out/$label.server.log" 2>&1 &
  local pid=$!
  wait_ready
  curl -s "http://127.0.0.1:$port/metrics" > "$out/$label.metrics.before"
  local began=$(date +%s.%N)
  "$brisk" bench --url "http://127.0.0.1:$port" --concurrency 64 --num-requests 128 \
    --warmup-requests 0 --input-tokens uniform:32:512 --output-tokens 32 --progress off \
    --out "$out/$label" > "$out/$label.bench.log" 2>&1
  local ended=$(date +%s.%N)
  curl -s "http://127.0.0.1:$port/metrics" > "$out/$label.metrics.after"
  kill "$pid"
  wait "$pid" 2> /dev/null || true
  python3 - "$out" "$label" "$began" "$ended" <<'PY'
import json, re, sys
out, label, began, ended = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
def metric(which, name):
    text = open(f"{out}/{label}.metrics.{which}").read()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
def delta(name):
    return metric("after", name) - metric("before", name)
run = json.load(open(f"{out}/{label}/result.json"))["runs"][0]
row = {
    "label": label, "wall_s": ended - began,
    "output_tok_s": run["output_token_throughput"],
    "ttft_p50_ms": run["ttft_ms"]["p50"], "ttft_p99_ms": run["ttft_ms"]["p99"],
    "tpot_p50_ms": run["tpot_ms"]["p50"], "tpot_p99_ms": run["tpot_ms"]["p99"],
    "failed": run["requests"]["failed"],
    "saves": delta("brisk_prefix_cache_host_saves_total"),
    "saved_mib": delta("brisk_prefix_cache_host_saved_bytes_total") / 2**20,
    "save_s": delta("brisk_prefix_cache_host_save_seconds_total"),
    "hits": delta("brisk_prefix_cache_hits_total"),
}
row["save_share_of_wall"] = row["save_s"] / row["wall_s"]
print(json.dumps(row))
with open(f"{out}/runs.jsonl", "a") as f:
    f.write(json.dumps(row) + "\n")
PY
}

for round in $(seq 1 "$rounds"); do
  if (( round % 2 )); then
    run "host-tier-$round"
    run "cache-ram-0-$round" --cache-ram 0
  else
    run "cache-ram-0-$round" --cache-ram 0
    run "host-tier-$round"
  fi
done
