#!/usr/bin/env python3
"""Preemption under KV pressure: resumed by a restore from the host tier, or recomputed (issue 21).

More streams than the KV cache holds to the end: brisk serve preempts the latest-arrived running
requests and resumes them when room frees. Two configurations of the same server take turns,
each started fresh, the order reversed every other round:

  swap        the defaults: a preempted request's KV state goes to the host tier (--cache-ram)
              and is restored when it resumes
  recompute   --cache-ram 0: it recomputes its prompt and generated tokens when it resumes

`brisk bench` sends one wave of N requests at once (closed loop, concurrency N), ignore_eos,
nothing sampled sent. After each run the server's /metrics gives preemptions, swaps and host
restores. Prints a markdown table of medians; --out writes every run as JSON.

  python3 bench/preemption_swap.py --rounds 2 --out bench/results/preemption_swap.json
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling_compare import median, row_numbers, run_bench, write_out  # noqa: E402
from serve_compare import BIN_DIR, free_port, log, start_server  # noqa: E402

CONFIGS = {"swap": [], "recompute": ["--cache-ram", "0"]}
COUNTERS = {"preemptions": "brisk_preemptions_total", "swaps": "brisk_preemption_swaps_total",
            "restores": "brisk_prefix_cache_host_restores_total"}


def counters(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out = {}
    for key, name in COUNTERS.items():
        found = re.search(rf"^{name} (\S+)$", text, re.M)
        out[key] = float(found.group(1)) if found else float("nan")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=2048)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--input-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    bench = argparse.Namespace(brisk_bin=args.brisk_bin, concurrency=args.streams,
                               num_requests=args.streams, input_tokens=args.input_tokens,
                               output_tokens=args.output_tokens, warmup_requests=0)
    runs: list[dict] = []
    names = list(CONFIGS)
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                port = free_port()
                argv = [str(args.brisk_bin), "serve", "--model", args.model, "--port", str(port),
                        "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                        "--max-seqs", str(args.streams), "--max-queue-delay-ms", "0",
                        *CONFIGS[name]]
                handle = start_server(name, argv, port, "/ready", scratch)
                try:
                    run = run_bench(bench, port, [], Path(scratch) / f"{name}-{round_}")
                    numbers = {**row_numbers(run), **counters(port)}
                finally:
                    handle.stop()
                    time.sleep(1)
                numbers["e2e_p99_ms"] = run["summary"].get("e2e_ms", {}).get("p99", float("nan"))
                log(f"  {name} #{round_}: {numbers}")
                runs.append({"config": name, "round": round_, **numbers})

    keys = ["output_tps", "ttft_p50_ms", "itl_p99_ms", "e2e_p99_ms", "preemptions", "swaps",
            "restores", "errors"]
    print(f"\n{args.streams} streams, {args.input_tokens} in / {args.output_tokens} out, "
          f"--ctx-size {args.ctx_size}, {args.model}; medians of {args.rounds} rounds:\n")
    print("| config | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    table = []
    for name in names:
        row = {k: median([r[k] for r in runs if r["config"] == name]) for k in keys}
        row["config"] = name
        table.append(row)
        print(f"| {name} | " + " | ".join(f"{row[k]:.1f}" for k in keys) + " |")
    ratios = [a["output_tps"] / b["output_tps"] for a in runs for b in runs
              if a["round"] == b["round"] and a["config"] == "swap" and b["config"] == "recompute"]
    print(f"\nswap / recompute output tok/s, per round: {[round(r, 3) for r in ratios]}, "
          f"median {median(ratios):.2f}x")
    write_out(args, table, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
