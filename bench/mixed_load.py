#!/usr/bin/env python3
"""Mixed long/short traffic: does a long prompt hold back the short ones? (issue 9, benchmark 1)

90% short prompts (~100 tokens) and 10% long ones (~2,050 tokens), 64 tokens out each with no
sampling parameters sent (each server's defaults, as a plain client), Poisson arrivals at --rate,
the same seeded arrivals and prompts for every server. Each configuration runs in its own fresh
server, interleaved round by round (--rounds): brisk serve as built, brisk serve with
--long-prefill-tokens 0 (oldest-first prefill), and llama.cpp's llama-server from the same build
with the same model, threads, context and sequences. brisk bench is the client for all of them.

Reports per configuration (medians over rounds): short-request TTFT p50/p99, short-request ITL
p50/p99 (every gap between two content chunks of a short request), long-request TTFT p50, output
tokens/s, and ratios to llama-server. --out writes every round's numbers as JSON; the bench
output directories (result.json, requests.csv) stay under --work.

  python3 bench/mixed_load.py --rounds 2 --out bench/results/mixed_load.json
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from percentile import percentile
from serve_compare import FILLER_WORDS, free_port, log, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN_DIR = REPO_ROOT / "build" / "bin"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--model-path", type=Path,
                   default=Path.home() / ".cache/brisk/models/gemma-3-270m-q4_k_m.gguf")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=32768)
    p.add_argument("--seqs", type=int, default=8)
    p.add_argument("--rate", type=float, default=0.25)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--long-share", type=float, default=0.1)
    p.add_argument("--short-words", type=int, default=100)
    p.add_argument("--long-words", type=int, default=2050)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--configs", default="brisk,brisk-oldest-first,llama-server")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                   help="another brisk configuration, e.g. 'itl150=--target-itl-ms 150' "
                        "(added to --configs; repeatable)")
    p.add_argument("--baseline-brisk", type=Path, default=None,
                   help="another brisk binary (an older build), run as config `brisk-baseline` "
                        "with brisk's flags")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args()


def write_dataset(path: Path, args: argparse.Namespace) -> list[bool]:
    """One prompt per request (the warmup's first); unique openings, so no prefix is shared."""
    rng = random.Random(args.seed)
    longs = []
    with path.open("w") as f:
        for i in range(args.requests + 1):
            is_long = i > 0 and rng.random() < args.long_share
            n = args.long_words if is_long else args.short_words
            words = [FILLER_WORDS[(i * 7 + k) % len(FILLER_WORDS)] for k in range(n - 3)]
            f.write(json.dumps({"prompt": f"Request {i} {rng.randrange(10**6)}: " + " ".join(words)})
                    + "\n")
            longs.append(is_long)
    return longs


def server_argv(config: str, port: int, args: argparse.Namespace) -> tuple[list[str], str]:
    variants = dict(v.split("=", 1) for v in args.variant)
    if config.startswith("brisk") or config in variants:
        binary = BIN_DIR / "brisk"
        if config == "brisk-baseline":
            if args.baseline_brisk is None:
                raise SystemExit("brisk-baseline needs --baseline-brisk PATH")
            binary = args.baseline_brisk
        argv = [str(binary), "serve", "--model", args.model, "--host", "127.0.0.1",
                "--port", str(port), "--threads", str(args.threads), "--ctx-size",
                str(args.ctx_size), "--max-seqs", str(args.seqs)]
        if config == "brisk-oldest-first":
            argv += ["--long-prefill-tokens", "0"]
        argv += variants.get(config, "").split()
        return argv, "/ready"
    return [str(BIN_DIR / "llama-server"), "-m", str(args.model_path), "--host", "127.0.0.1",
            "--port", str(port), "-t", str(args.threads), "-c", str(args.ctx_size),
            "-np", str(args.seqs), "--cont-batching"], "/health"


def summarize(requests_csv: Path, long_threshold: int) -> dict:
    short_ttft, long_ttft, short_itl = [], [], []
    out_tokens, first_sent, last_end, failed = 0, None, None, 0
    with requests_csv.open() as f:
        for row in csv.DictReader(f):
            if row["status"] != "200" or row["error"]:
                failed += 1
                continue
            scheduled = float(row["scheduled_ms"])
            ttft = float(row["first_token_ms"]) - scheduled
            chunks = [float(x) for x in row["chunk_ms"].split()]
            is_long = int(row["prompt_tokens"]) > long_threshold
            (long_ttft if is_long else short_ttft).append(ttft)
            if not is_long:
                short_itl += [b - a for a, b in zip(chunks, chunks[1:])]
            out_tokens += int(row["completion_tokens"])
            first_sent = scheduled if first_sent is None else min(first_sent, scheduled)
            last_end = float(row["end_ms"]) if last_end is None else max(last_end,
                                                                         float(row["end_ms"]))
    span_s = (last_end - first_sent) / 1000 if last_end else float("nan")
    return {
        "short_requests": len(short_ttft), "long_requests": len(long_ttft), "failed": failed,
        "short_ttft_p50_ms": percentile(short_ttft, 50), "short_ttft_p99_ms": percentile(short_ttft, 99),
        "short_itl_p50_ms": percentile(short_itl, 50), "short_itl_p99_ms": percentile(short_itl, 99),
        "long_ttft_p50_ms": percentile(long_ttft, 50) if long_ttft else float("nan"),
        "output_tokens_per_s": out_tokens / span_s,
    }


def main() -> None:
    args = parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    configs += [v.split("=", 1)[0] for v in args.variant]
    work = args.work or Path(tempfile.mkdtemp(prefix="mixed_load-"))
    work.mkdir(parents=True, exist_ok=True)
    dataset = work / "mixed.jsonl"
    longs = write_dataset(dataset, args)
    log(f"{sum(longs)} long of {args.requests} measured requests; work dir {work}")
    rounds: list[dict] = []
    for r in range(args.rounds):
        for config in configs:
            port = free_port()
            argv, ready = server_argv(config, port, args)
            server = start_server(config, argv, port, ready, str(work))
            out_dir = work / f"round{r}-{config}"
            cmd = [str(BIN_DIR / "brisk"), "bench", "--url", f"http://127.0.0.1:{port}",
                   "--model", args.model, "--dataset", str(dataset), "--output-tokens",
                   str(args.output_tokens), "--rate", str(args.rate), "--num-requests",
                   str(args.requests), "--warmup-requests", "1", "--seed", str(args.seed),
                   "--progress", "off", "--out", str(out_dir)]
            try:
                log(f"round {r} {config}: " + " ".join(cmd))
                subprocess.run(cmd, check=True, stdout=sys.stderr)
            finally:
                server.stop()
            stats = summarize(out_dir / "requests.csv", (args.short_words + args.long_words) // 2)
            stats.update({"round": r, "config": config, "server_argv": argv, "bench_argv": cmd})
            log(json.dumps(stats))
            rounds.append(stats)

    keys = ["short_ttft_p50_ms", "short_ttft_p99_ms", "short_itl_p50_ms", "short_itl_p99_ms",
            "long_ttft_p50_ms", "output_tokens_per_s"]
    medians = {c: {k: statistics.median(x[k] for x in rounds if x["config"] == c) for k in keys}
               for c in configs}
    print("| config | short TTFT p50 / p99 ms | short ITL p50 / p99 ms | long TTFT p50 ms | out tok/s |")
    print("|---|---|---|---|---|")
    for c in configs:
        m = medians[c]
        print(f"| {c} | {m['short_ttft_p50_ms']:.0f} / {m['short_ttft_p99_ms']:.0f} | "
              f"{m['short_itl_p50_ms']:.1f} / {m['short_itl_p99_ms']:.0f} | "
              f"{m['long_ttft_p50_ms']:.0f} | {m['output_tokens_per_s']:.1f} |")
    if "llama-server" in medians:
        ref = medians["llama-server"]
        for c in configs:
            if c == "llama-server":
                continue
            ratios = {k: medians[c][k] / ref[k] for k in keys}
            print(f"{c} / llama-server: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    if args.out:
        args.out.write_text(json.dumps({
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {platform.processor() or ''} nproc={__import__('os').cpu_count()}",
            "command": " ".join(sys.argv), "args": {k: str(v) for k, v in vars(args).items()},
            "rounds": rounds, "medians": medians}, indent=2) + "\n")


if __name__ == "__main__":
    main()
