#!/usr/bin/env python3
"""Closed-loop users against a server that sheds load: do the refusals eat the throughput?
(issue 21, the 429 storms of BENCHMARKS.md "One model alone in a server of several")

brisk serve on SmolLM2 135M with --max-queue-delay-ms 2000 (so that 16 closed-loop users, chat
prompts of 64-512 tokens and 128 out, are refused often), measured by brisk bench for --duration
seconds. Four configurations, interleaved, the order reversed every other round:

  before-ignore   the server before the admission precheck (--before-bin), users resending at once
  before-honour   the same server, users waiting each refusal's Retry-After (brisk bench default)
  after-ignore    this server (refusals answered before the body is parsed), users resending
  after-honour    this server, users waiting Retry-After

Reported: output tokens/s of the requests served, requests served and refused, and the server
process's CPU time over the run per request answered (where refusals dominate, what a refusal
costs the server; its clients are on other machines in production, so that CPU is the server's
own loss).

  python3 bench/refusal_storm.py --before-bin /tmp/brisk-before --rounds 2 \\
      --out bench/results/refusal_storm_2026-12-05/storm.json

--mode cost: what one refusal takes. --max-seqs 1 --max-queued-requests 1, two long requests
fill the running sequence and the queue, then one client sends --requests chat requests of a
~400-word prompt one after another, each refused (queue_full); their latency at the client, by
server (before, after), interleaved.

  python3 bench/refusal_storm.py --mode cost --before-bin /tmp/brisk-before --rounds 2 \\
      --out bench/results/refusal_storm_2026-12-05/cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_compare import (BIN_DIR, free_port, log, prompt_text, start_server,  # noqa: E402
                           write_runs)

CONFIGS = ["before-ignore", "before-honour", "after-ignore", "after-honour"]


def one_run(args, config: str, scratch: Path, label: str) -> dict:
    server_bin = args.before_bin if config.startswith("before") else args.brisk_bin
    port = free_port()
    server = start_server(label, [str(server_bin), "serve", "--model", "smollm2-135m",
                                  "--threads", str(args.threads), "--ctx-size", "8192",
                                  "--port", str(port), "--max-queue-delay-ms",
                                  str(args.max_queue_delay_ms)],
                          port, "/ready", str(scratch))
    try:
        out = scratch / label
        cpu_before = server.cpu_seconds()
        subprocess.run([str(args.brisk_bin), "bench", "--url", f"http://127.0.0.1:{port}",
                        "--model", "smollm2-135m", "--endpoint", "chat", "--progress", "off",
                        "--concurrency", "16", "--duration", str(args.duration),
                        "--input-tokens", "uniform:64:512", "--output-tokens", "128",
                        "--retry-after", config.split("-")[1], "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL, timeout=args.duration * 10 + 300)
        server_cpu_s = server.cpu_seconds() - cpu_before
        run = json.loads((out / "result.json").read_text())["runs"][0]
        result = {"output_tps": run.get("output_token_throughput"),
                  "served": run["requests"]["ok"], "refused": run["requests"]["failed"],
                  "server_cpu_s": server_cpu_s,
                  # Refusals dominate the server's work when users resend at once.
                  "server_cpu_us_per_request": server_cpu_s * 1e6
                  / max(1, run["requests"]["ok"] + run["requests"]["failed"])}
        log(f"  {label}: {result}")
        return result
    finally:
        server.stop()


def refusal_cost(args, which: str, scratch: Path, label: str) -> dict:
    import http.client
    import threading
    server_bin = args.before_bin if which == "before" else args.brisk_bin
    port = free_port()
    server = start_server(label, [str(server_bin), "serve", "--model", "smollm2-135m",
                                  "--threads", str(args.threads), "--ctx-size", "8192",
                                  "--port", str(port), "--max-seqs", "1",
                                  "--max-queued-requests", "1"],
                          port, "/ready", str(scratch))

    def long_request():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True}),
            headers={"Content-Type": "application/json"})
        conn.getresponse().read()

    holders = [threading.Thread(target=long_request, daemon=True) for _ in range(2)]
    try:
        for holder in holders:
            holder.start()
            time.sleep(0.5)
        body = json.dumps({"model": "smollm2-135m", "messages": [
            {"role": "user", "content": prompt_text(1, 400)}]})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        latencies, statuses = [], []
        for _ in range(args.requests):
            started = time.perf_counter()
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            latencies.append((time.perf_counter() - started) * 1e6)
            statuses.append(response.status)
        refused = [t for t, s in zip(latencies, statuses) if s == 429]
        result = {"refused": len(refused), "other": len(statuses) - len(refused),
                  "refusal_us_p50": statistics.median(refused) if refused else None,
                  "refusal_us_mean": statistics.mean(refused) if refused else None}
        log(f"  {label}: {result}")
        return result
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--before-bin", type=Path, required=True,
                    help="a brisk built before the admission precheck")
    ap.add_argument("--mode", choices=["storm", "cost"], default="storm")
    ap.add_argument("--requests", type=int, default=500, help="--mode cost: refusals timed")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=40)
    ap.add_argument("--max-queue-delay-ms", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    runs = []
    if args.mode == "cost":
        with tempfile.TemporaryDirectory() as scratch_dir:
            for round_ in range(args.rounds):
                order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
                for which in order:
                    label = f"cost-{which}-{round_}"
                    log(label)
                    runs.append({"config": which, "round": round_,
                                 **refusal_cost(args, which, Path(scratch_dir), label)})
        print("\n| server | refusal latency p50 µs (each round) | mean µs |")
        print("|---|---|---|")
        for which in ("before", "after"):
            mine = [r for r in runs if r["config"] == which]
            p50 = [r["refusal_us_p50"] for r in mine]
            print(f"| {which} | {statistics.median(p50):.0f} ({', '.join(f'{v:.0f}' for v in p50)}) "
                  f"| {statistics.median(r['refusal_us_mean'] for r in mine):.0f} |")
        write_runs(args.out, runs)
        return 0
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for round_ in range(args.rounds):
            for config in CONFIGS if round_ % 2 == 0 else list(reversed(CONFIGS)):
                label = f"{config}-{round_}"
                log(label)
                runs.append({"config": config, "round": round_,
                             **one_run(args, config, scratch, label)})
    print("\n| configuration | output tok/s (median; each round) | served | refused | server CPU µs per request |")
    print("|---|---|---|---|---|")
    for config in CONFIGS:
        mine = [r for r in runs if r["config"] == config]
        tps = [r["output_tps"] for r in mine]
        print(f"| {config} | {statistics.median(tps):.1f} ({', '.join(f'{t:.1f}' for t in tps)}) "
              f"| {statistics.median(r['served'] for r in mine):.0f} "
              f"| {statistics.median(r['refused'] for r in mine):.0f} "
              f"| {statistics.median(r['server_cpu_us_per_request'] for r in mine):.0f} |")
    write_runs(args.out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
