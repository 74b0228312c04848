#!/usr/bin/env python3
"""Shared prefix: does a repeated system prompt cost its prefill every time? (issue 9, benchmark 2)

Every request is a chat with the same ~1,000-token system prompt and a short user turn of its own
(a few words), 32 tokens out, no sampling parameters sent, at --concurrency streams (closed loop).
Configurations, each in its own fresh server, interleaved round by round (--rounds): brisk serve
(prefix cache on, the default), brisk serve --prefix-cache off, and llama.cpp's llama-server from
the same build with the same model, threads, context and sequences (its per-slot prompt cache,
`cache_prompt`, is on by default). brisk bench is the client for all of them.

With --prefixes K the requests rotate over K different system prompts (request i has prompt
i mod K; they share no token): more distinct prefixes than the KV cache holds (issue 21,
benchmark 3) — a KV-only cache evicts each before its next turn, the host tier (`--cache-ram`,
configuration brisk-host-off turns it off) restores it. For brisk the prefix cache's own counters
(/metrics, read before the server stops) give the hit rate and where hits came from.

With --unique the same load has no shared prefix at all (every prompt opens with its own
number, the same length): what keeping finished requests' cells costs when nothing is reused —
in llama.cpp's unified KV buffer each step's attention spans the cells kept (benchmark 4's
no-regression check for the cache).

Reports per configuration (medians over rounds): TTFT mean / p50 / p99, output tokens/s, and the
ratios of brisk's mean TTFT to llama-server's and to brisk with the cache off. --out writes every
round's numbers as JSON; bench outputs (result.json, requests.csv) stay under --work.

  python3 bench/shared_prefix.py --rounds 2 --out bench/results/shared_prefix.json
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from percentile import percentile
from serve_compare import FILLER_WORDS, free_port, log, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN_DIR = REPO_ROOT / "build" / "bin"
QUESTIONS = ["What is {}?", "Describe {} briefly.", "Where is {} found?", "Why does {} matter?"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--model-path", type=Path,
                   default=Path.home() / ".cache/brisk/models/gemma-3-270m-q4_k_m.gguf")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=16384)
    p.add_argument("--seqs", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--system-words", type=int, default=800, help="~1,000 tokens on Gemma 3")
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--prefixes", type=int, default=1,
                   help="distinct system prompts, in rotation (1: all requests share one)")
    p.add_argument("--unique", action="store_true",
                   help="no shared prefix: each prompt opens with its own number")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--configs", default="brisk,brisk-cache-off,llama-server")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args()


def system_prompt(index: int, words: int) -> str:
    """The index-th system prompt: its own opening, then filler words from an offset of its own."""
    return f"Desk {index}: you are the help desk of travel company number {index}. " + " ".join(
        FILLER_WORDS[(k + 7 * index) % len(FILLER_WORDS)] for k in range(words))


def write_dataset(path: Path, args: argparse.Namespace) -> None:
    with path.open("w") as f:
        for i in range(args.requests + 1):
            system = system_prompt(i % args.prefixes if args.prefixes > 1 else 0,
                                   args.system_words)
            topic = FILLER_WORDS[(i * 11) % len(FILLER_WORDS)]
            question = QUESTIONS[i % len(QUESTIONS)].format(f"the {topic} number {i}")
            if args.unique:  # the same words, behind an opening of its own
                messages = [{"role": "user", "content": f"Request {i * 104729 % 10**6}: "
                             + system + " " + question}]
            else:
                messages = [{"role": "system", "content": system},
                            {"role": "user", "content": question}]
            f.write(json.dumps({"messages": messages}) + "\n")


def server_argv(config: str, port: int, args: argparse.Namespace) -> tuple[list[str], str]:
    if config.startswith("brisk"):
        argv = [str(BIN_DIR / "brisk"), "serve", "--model", args.model, "--host", "127.0.0.1",
                "--port", str(port), "--threads", str(args.threads), "--ctx-size",
                str(args.ctx_size), "--max-seqs", str(args.seqs)]
        if config == "brisk-cache-off":
            argv += ["--prefix-cache", "off"]
        if config == "brisk-host-off":
            argv += ["--cache-ram", "0"]
        return argv, "/ready"
    return [str(BIN_DIR / "llama-server"), "-m", str(args.model_path), "--host", "127.0.0.1",
            "--port", str(port), "-t", str(args.threads), "-c", str(args.ctx_size),
            "-np", str(args.seqs), "--cont-batching"], "/health"


CACHE_COUNTERS = {
    "queries": "brisk_prefix_cache_queries_total",
    "query_tokens": "brisk_prefix_cache_query_tokens_total",
    "hits": "brisk_prefix_cache_hits_total",
    "hit_tokens": "brisk_prefix_cache_hit_tokens_total",
    "host_restores": "brisk_prefix_cache_host_restores_total",
    "host_restore_seconds": "brisk_prefix_cache_host_restore_seconds_total",
    "host_saves": "brisk_prefix_cache_host_saves_total",
    "host_evictions": "brisk_prefix_cache_host_evictions_total",
    "host_bytes": "brisk_prefix_cache_host_bytes",
}


def prefix_cache_counters(port: int) -> dict:
    """brisk's prefix-cache counters (summed over labels), and the misses by reason."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values: dict = {}
    misses: dict = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name_labels, value = line.rsplit(" ", 1)
        name = name_labels.split("{", 1)[0]
        if name == "brisk_prefix_cache_misses_total":
            reason = name_labels.split('reason="', 1)[1].split('"', 1)[0]
            misses[reason] = misses.get(reason, 0) + float(value)
        for key, metric in CACHE_COUNTERS.items():
            if name == metric:
                values[key] = values.get(key, 0) + float(value)
    values["misses"] = misses
    values["hit_rate"] = values.get("hits", 0) / values["queries"] if values.get("queries") else 0
    values["token_hit_rate"] = (values.get("hit_tokens", 0) / values["query_tokens"]
                                if values.get("query_tokens") else 0)
    return values


def summarize(requests_csv: Path) -> dict:
    ttft, out_tokens, prompt_tokens, failed = [], 0, [], 0
    first_sent, last_end = None, None
    with requests_csv.open() as f:
        for row in csv.DictReader(f):
            if row["status"] != "200" or row["error"]:
                failed += 1
                continue
            scheduled = float(row["scheduled_ms"])
            ttft.append(float(row["first_token_ms"]) - scheduled)
            out_tokens += int(row["completion_tokens"])
            prompt_tokens.append(int(row["prompt_tokens"]))
            first_sent = scheduled if first_sent is None else min(first_sent, scheduled)
            end = float(row["end_ms"])
            last_end = end if last_end is None else max(last_end, end)
    span_s = (last_end - first_sent) / 1000 if last_end else float("nan")
    return {"requests": len(ttft), "failed": failed,
            "prompt_tokens_median": statistics.median(prompt_tokens) if prompt_tokens else 0,
            "ttft_mean_ms": statistics.fmean(ttft) if ttft else float("nan"),
            "ttft_p50_ms": percentile(ttft, 50), "ttft_p99_ms": percentile(ttft, 99),
            "output_tokens_per_s": out_tokens / span_s}


def main() -> None:
    args = parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    work = args.work or Path(tempfile.mkdtemp(prefix="shared_prefix-"))
    work.mkdir(parents=True, exist_ok=True)
    dataset = work / "shared_prefix.jsonl"
    write_dataset(dataset, args)
    rounds: list[dict] = []
    for r in range(args.rounds):
        for config in configs:
            port = free_port()
            argv, ready = server_argv(config, port, args)
            server = start_server(config, argv, port, ready, str(work))
            out_dir = work / f"round{r}-{config}"
            cmd = [str(BIN_DIR / "brisk"), "bench", "--url", f"http://127.0.0.1:{port}",
                   "--model", args.model, "--endpoint", "chat", "--dataset", str(dataset),
                   "--output-tokens", str(args.output_tokens), "--concurrency",
                   str(args.concurrency), "--num-requests", str(args.requests),
                   "--warmup-requests", "1", "--progress", "off", "--out", str(out_dir)]
            cache = None
            try:
                log(f"round {r} {config}: " + " ".join(cmd))
                subprocess.run(cmd, check=True, stdout=sys.stderr)
                if config.startswith("brisk"):
                    cache = prefix_cache_counters(port)
            finally:
                server.stop()
            stats = summarize(out_dir / "requests.csv")
            if cache is not None:
                stats["prefix_cache"] = cache
            stats.update({"round": r, "config": config, "server_argv": argv, "bench_argv": cmd})
            log(json.dumps(stats))
            rounds.append(stats)

    keys = ["ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "output_tokens_per_s"]
    medians = {c: {k: statistics.median(x[k] for x in rounds if x["config"] == c) for k in keys}
               for c in configs}
    def hit_rate(config: str) -> str:
        rates = [x["prefix_cache"]["hit_rate"] for x in rounds
                 if x["config"] == config and "prefix_cache" in x]
        restores = [x["prefix_cache"].get("host_restores", 0) for x in rounds
                    if x["config"] == config and "prefix_cache" in x]
        if not rates:
            return "—"
        return f"{statistics.median(rates):.0%} ({statistics.median(restores):.0f} from host)"

    print("| config | TTFT mean / p50 / p99 ms | out tok/s | prefix-cache hit rate |")
    print("|---|---|---|---|")
    for c in configs:
        m = medians[c]
        print(f"| {c} | {m['ttft_mean_ms']:.0f} / {m['ttft_p50_ms']:.0f} / {m['ttft_p99_ms']:.0f} "
              f"| {m['output_tokens_per_s']:.1f} | {hit_rate(c)} |")
    for ref in ("llama-server", "brisk-cache-off", "brisk-host-off"):
        if "brisk" in medians and ref in medians:
            ratio = medians["brisk"]["ttft_mean_ms"] / medians[ref]["ttft_mean_ms"]
            print(f"brisk mean TTFT / {ref}: {ratio:.2f}")
    if args.out:
        args.out.write_text(json.dumps({
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {platform.processor() or ''} nproc={os.cpu_count()}",
            "command": " ".join(sys.argv), "args": {k: str(v) for k, v in vars(args).items()},
            "rounds": rounds, "medians": medians}, indent=2) + "\n")


if __name__ == "__main__":
    main()
