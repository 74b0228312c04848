#!/usr/bin/env python3
"""Traces (issue 25): record -> replay fidelity, and what writing a trace costs.

Fidelity: brisk serve A records (default --trace-block-tokens) (--trace-out) a mixed load from brisk bench: an open-loop
Poisson run of chats that share one of four system prompts, questions of mixed lengths, output
lengths drawn per request. Its trace is replayed with brisk bench --trace against a fresh brisk
serve B, also recording. Compared, request by request in arrival order:
  - arrival offsets: B's recorded arrivals against A's (both rebased on their first request);
  - lengths: B's input and output tokens against A's (must be equal);
  - prefix-cache hit tokens: the sum of B's cached_tokens against A's.

Cost: --streams closed-loop streams of short prompts against brisk serve with and without
--trace-out, --rounds interleaved rounds (ABBA order); output tok/s of each, and the ratio.

  python3 bench/trace_replay.py --out bench/results/trace_replay_2026-12-03.json
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import random
import statistics
import subprocess
import tempfile
from pathlib import Path

from serve_compare import free_port, log, machine_info, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PROMPTS = [
    "You are a helpful assistant for a bookshop. " * 20,
    "You answer questions about the weather, briefly and politely. " * 18,
    "You are a code reviewer who explains each remark in one sentence. " * 16,
    "You translate short English phrases into plain, simple English. " * 17,
]
TOPICS = ["the capital of France", "a good book for a long train ride", "why the sky is blue",
          "how to boil an egg", "the tallest mountain", "a name for a cat", "what rain is",
          "how a bicycle works"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--brisk", type=Path, default=REPO_ROOT / "build" / "bin" / "brisk")
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=16384)
    p.add_argument("--max-seqs", type=int, default=8)
    p.add_argument("--requests", type=int, default=48, help="requests of the recorded load")
    p.add_argument("--rate", type=float, default=1.5, help="their Poisson rate, per second")
    p.add_argument("--streams", type=int, default=16, help="streams of the cost comparison")
    p.add_argument("--cost-requests", type=int, default=64)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args()


def serve(args, name: str, logdir: str, extra: list[str]):
    port = free_port()
    argv = [str(args.brisk), "serve", "--model", args.model, "--port", str(port), "--host",
            "127.0.0.1", "--ctx-size", str(args.ctx_size), "--threads", str(args.threads),
            "--max-seqs", str(args.max_seqs), *extra]
    return start_server(name, argv, port, "/ready", logdir)


def bench(args, url: str, out: Path, *extra: str) -> dict:
    argv = [str(args.brisk), "bench", "--url", url, "--progress", "off", "--out", str(out),
            *map(str, extra)]
    log("running " + " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"brisk bench failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads((out / "result.json").read_text())


def read_trace(path: Path) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda line: line["arrival_s"])
    first = lines[0]["arrival_s"]
    for line in lines:
        line["offset_s"] = line["arrival_s"] - first
    return lines


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    rank = (len(values) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


def recorded_load(args, workdir: Path) -> Path:
    """The chats to record: a JSONL dataset for brisk bench --dataset."""
    rng = random.Random(1)
    path = workdir / "chats.jsonl"
    with open(path, "w") as f:
        for i in range(args.requests):
            system = SYSTEM_PROMPTS[rng.randrange(len(SYSTEM_PROMPTS))]
            question = f"Tell me about {rng.choice(TOPICS)}." + " Please." * rng.randrange(0, 40)
            f.write(json.dumps({"messages": [{"role": "system", "content": system},
                                             {"role": "user", "content": question}],
                                "max_tokens": rng.randrange(8, 48)}) + "\n")
    return path


def fidelity(args, logdir: str, workdir: Path) -> dict:
    trace_a, trace_b = workdir / "a.jsonl", workdir / "b.jsonl"
    dataset = recorded_load(args, workdir)
    a = serve(args, "brisk-record", logdir, ["--trace-out", str(trace_a)])
    try:
        bench(args, f"http://127.0.0.1:{a.port}", workdir / "recorded", "--endpoint", "chat",
              "--dataset", dataset, "--rate", args.rate, "--num-requests", args.requests,
              "--warmup-requests", 0, "--seed", 1)
    finally:
        a.stop()
    b = serve(args, "brisk-replay", logdir, ["--trace-out", str(trace_b)])
    try:
        replay = bench(args, f"http://127.0.0.1:{b.port}", workdir / "replayed", "--trace", trace_a,
                       "--warmup-requests", 0)
    finally:
        b.stop()
    with open(workdir / "replayed" / "requests.csv") as f:
        lag_ms = [float(row["sent_ms"]) - float(row["scheduled_ms"]) for row in csv.DictReader(f)]
    la, lb = read_trace(trace_a), read_trace(trace_b)
    if len(la) != len(lb):
        raise SystemExit(f"recorded {len(la)} requests, the replay {len(lb)}")
    offsets_ms = [abs(x["offset_s"] - y["offset_s"]) * 1000 for x, y in zip(la, lb)]
    input_equal = sum(x["input_tokens"] == y["input_tokens"] for x, y in zip(la, lb))
    output_equal = sum(x["output_tokens"] == y["output_tokens"] for x, y in zip(la, lb))
    cached_a = sum(max(0, x["cached_tokens"] or 0) for x in la)
    cached_b = sum(max(0, y["cached_tokens"] or 0) for y in lb)
    return {
        "requests": len(la),
        "arrival_offset_error_ms": {"p50": percentile(offsets_ms, 50),
                                    "p99": percentile(offsets_ms, 99), "max": max(offsets_ms)},
        "replay_send_lag_ms": {"p50": percentile(lag_ms, 50), "p99": percentile(lag_ms, 99),
                               "max": max(lag_ms)},
        "input_tokens_equal": input_equal,
        "output_tokens_equal": output_equal,
        "input_tokens_total": sum(x["input_tokens"] for x in la),
        "cached_tokens_recorded": cached_a,
        "cached_tokens_replayed": cached_b,
        "cached_ratio": cached_b / cached_a if cached_a else None,
        "replay_requests": replay["runs"][0]["requests"],
        "replay_prompt": replay["workload"]["prompt"],
    }


def cost(args, logdir: str, workdir: Path) -> dict:
    rounds = []
    for r in range(args.rounds):
        row = {}
        # ABBA: each configuration goes first in half of the rounds.
        for name in (("plain", "trace") if r % 2 == 0 else ("trace", "plain")):
            extra = ["--trace-out", str(workdir / f"cost-{r}.jsonl")] if name == "trace" else []
            server = serve(args, f"brisk-{name}", logdir, extra)
            try:
                result = bench(args, f"http://127.0.0.1:{server.port}", workdir / f"{name}-{r}",
                               "--concurrency", args.streams, "--num-requests", args.cost_requests,
                               "--input-tokens", 64, "--output-tokens", 32, "--seed", r)
            finally:
                server.stop()
            row[name] = result["runs"][0]["output_token_throughput"]
        row["ratio"] = row["trace"] / row["plain"]
        log(f"round {r}: {row}")
        rounds.append(row)
    return {"streams": args.streams, "rounds": rounds,
            "median_ratio": statistics.median(r["ratio"] for r in rounds)}


def main() -> int:
    args = parse_args()
    logdir = tempfile.mkdtemp(prefix="trace_replay-")
    workdir = Path(tempfile.mkdtemp(prefix="trace_replay-work-"))
    result = {
        "command": "python3 bench/trace_replay.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if k not in ("brisk",)),
        "date": datetime.date.today().isoformat(),
        "machine": machine_info(),
        "fidelity": fidelity(args, logdir, workdir),
        "cost": cost(args, logdir, workdir),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
