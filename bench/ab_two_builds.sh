#!/usr/bin/env bash
# Two brisk builds side by side under the same closed-loop load, ABBA: each run a fresh
# `brisk serve` (default flags) and `brisk bench` against it at each --concurrency, chat prompts of
# 64-512 tokens and 32-256 out, no sampling parameters. Prints each run's output tok/s, TTFT p50/p99
# and ITL p99 per load point, and the medians per build; result.json files stay under OUT.
#
#   bench/ab_two_builds.sh NEW_BIN OLD_BIN OUT [CONCURRENCY=16,64] [DURATION_S=40] [ROUNDS=2]
set -euo pipefail
new_bin=$1 old_bin=$2 out=$3
concurrency=${4:-16,64} duration=${5:-40} rounds=${6:-2}
model=${MODEL:-gemma3-270m}
mkdir -p "$out"

run_one() {  # label binary
  local label=$1 bin=$2 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$bin" serve --model "$model" --threads 2 --port "$port" > "$out/$label.server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/ready" > /dev/null && break
    sleep 0.5
  done
  "$new_bin" bench --url "http://127.0.0.1:$port" --endpoint chat --concurrency "$concurrency" \
    --duration "$duration" --input-tokens uniform:64:512 --output-tokens uniform:32:256 \
    --progress off --out "$out/$label" > "$out/$label.bench.log" 2>&1 || true
  kill "$pid"; wait "$pid" 2> /dev/null || true
}

for round in $(seq 1 "$rounds"); do
  if (( round % 2 == 1 )); then order="new old"; else order="old new"; fi
  for which in $order; do
    if [[ $which == new ]]; then bin=$new_bin; else bin=$old_bin; fi
    echo "round $round: $which"
    run_one "$which-r$round" "$bin"
  done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for result in sorted(out.glob("*-r*/result.json")):
    build = result.parent.name.split("-r")[0]
    for point in json.loads(result.read_text())["runs"]:
        key = (build, point["load"].get("concurrency"))
        rows.setdefault(key, []).append(point)
        print(result.parent.name, "c", key[1], "out tok/s %.1f" % point["output_token_throughput"],
              "TTFT p50/p99 %.0f/%.0f ms" % (point["ttft_ms"]["p50"], point["ttft_ms"]["p99"]),
              "ITL p99 %.0f ms" % point["itl_ms"]["p99"])
for (build, c), points in sorted(rows.items()):
    med = lambda f: statistics.median(f(p) for p in points)
    print(f"median {build} c{c}: out tok/s {med(lambda p: p['output_token_throughput']):.1f}, "
          f"TTFT p50 {med(lambda p: p['ttft_ms']['p50']):.0f} ms, p99 {med(lambda p: p['ttft_ms']['p99']):.0f} ms, "
          f"ITL p99 {med(lambda p: p['itl_ms']['p99']):.0f} ms")
EOF
