#!/usr/bin/env python3
"""Overload: arrivals at a multiple of capacity for a while (issue 9, benchmark 3).

brisk serve with --max-queue-delay-ms LIMIT and llama.cpp's llama-server (same build, model,
threads, context and sequences) each get the same seeded Poisson arrivals at --rate for
--duration seconds, through brisk bench (128-token prompts, 64 tokens out, no sampling
parameters). Reports, per server: requests admitted and served, refused (429) and any other
failure; TTFT p50/p99/max of the served ones against LIMIT; how fast a refusal came (sent ->
end of the 429); and whether the server was idle again at the end (brisk's /metrics).

  python3 bench/overload.py --rate 3 --duration 60 --out bench/results/overload.json
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from percentile import percentile
from serve_compare import free_port, log, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN_DIR = REPO_ROOT / "build" / "bin"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--model-path", type=Path,
                   default=Path.home() / ".cache/brisk/models/gemma-3-270m-q4_k_m.gguf")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=8192)
    p.add_argument("--seqs", type=int, default=8)
    p.add_argument("--rate", type=float, default=3.0)
    p.add_argument("--duration", type=int, default=60)
    p.add_argument("--max-queue-delay-ms", type=float, default=2000)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--servers", default="brisk,llama-server")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args()


def summarize(requests_csv: Path) -> dict:
    ttft, refusal_ms, outcomes = [], [], Counter()
    with requests_csv.open() as f:
        for row in csv.DictReader(f):
            status = row["status"]
            if status == "200" and not row["error"]:
                outcomes["served"] += 1
                ttft.append(float(row["first_token_ms"]) - float(row["scheduled_ms"]))
            elif status == "429":
                outcomes["refused_429"] += 1
                refusal_ms.append(float(row["end_ms"]) - float(row["sent_ms"]))
            else:
                outcomes[f"failed_{status}_{row['error']}"] += 1
    out = dict(outcomes)
    if ttft:
        out.update(ttft_p50_ms=percentile(ttft, 50), ttft_p99_ms=percentile(ttft, 99),
                   ttft_max_ms=max(ttft))
    if refusal_ms:
        out.update(refusal_p50_ms=percentile(refusal_ms, 50),
                   refusal_p99_ms=percentile(refusal_ms, 99), refusal_max_ms=max(refusal_ms))
    return out


def brisk_idle(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    want = ("brisk_requests_running", "brisk_requests_waiting", "brisk_kv_cache_usage_ratio")
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in want:
            values[name] = float(value)
    return values


def main() -> None:
    args = parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="overload-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for name in [s.strip() for s in args.servers.split(",") if s.strip()]:
        port = free_port()
        if name == "brisk":
            argv = [str(BIN_DIR / "brisk"), "serve", "--model", args.model, "--host", "127.0.0.1",
                    "--port", str(port), "--threads", str(args.threads), "--ctx-size",
                    str(args.ctx_size), "--max-seqs", str(args.seqs), "--max-queued-requests",
                    "1000", "--max-queue-delay-ms", str(args.max_queue_delay_ms)]
            ready = "/ready"
        else:
            argv = [str(BIN_DIR / "llama-server"), "-m", str(args.model_path), "--host",
                    "127.0.0.1", "--port", str(port), "-t", str(args.threads), "-c",
                    str(args.ctx_size), "-np", str(args.seqs), "--cont-batching"]
            ready = "/health"
        server = start_server(name, argv, port, ready, str(work))
        out_dir = work / name
        cmd = [str(BIN_DIR / "brisk"), "bench", "--url", f"http://127.0.0.1:{port}", "--model",
               args.model, "--rate", str(args.rate), "--duration", str(args.duration),
               "--input-tokens", str(args.input_tokens), "--output-tokens",
               str(args.output_tokens), "--warmup-requests", "2", "--seed", "1", "--timeout",
               str(args.timeout), "--progress", "off", "--out", str(out_dir)]
        started = time.monotonic()
        try:
            log(f"{name}: " + " ".join(cmd))
            subprocess.run(cmd, stdout=sys.stderr)  # exits non-zero when requests failed
            wall_s = time.monotonic() - started
            idle = brisk_idle(port) if name == "brisk" else {}
        finally:
            server.stop()
        stats = summarize(out_dir / "requests.csv")
        stats.update(server=name, server_argv=argv, bench_argv=cmd, wall_s=wall_s,
                     idle_after=idle)
        log(json.dumps(stats))
        results.append(stats)
    for r in results:
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()
                          if k not in ("server_argv", "bench_argv")}))
    if args.out:
        args.out.write_text(json.dumps({
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv), "args": {k: str(v) for k, v in vars(args).items()},
            "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
