#!/usr/bin/env python3
"""n choices: does n = 4 cost one prefill? (issue 24, benchmark 2)

The same work two ways, on one brisk serve: 4 concurrent requests with n = 4 (16 choices whose
prompts are prefilled 4 times and shared), against 16 concurrent requests with n = 1 (the same
4 prompts, 4 requests each, prefilled 16 times). Every request streams (/v1/completions,
temperature 1, a seed, ignore_eos, --output-tokens out); each round opens its prompts with a
number of its own, so no round reuses another's cells. Rounds alternate the two ways.

Reports per way (medians over rounds): output tokens/s (completion tokens of all choices over the
wall time of the batch), TTFT of each choice (mean, p50, max: a later choice's first token waits
for its first choice's prefill), and the ratio n=4 / 16 separate.

  python3 bench/n_choices.py --model smollm2-135m --rounds 5 --out bench/results/n_choices.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from serve_compare import free_port, log, prompt_text, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
BRISK = REPO_ROOT / "build" / "bin" / "brisk"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=16384)
    p.add_argument("--seqs", type=int, default=16)
    p.add_argument("--prompt-words", type=int, default=400)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    # A cold server prices the first burst of 16 long prompts from a warm-up's tiny one and
    # refuses part of it (429 queue_delay): admission is not what this measures.
    p.add_argument("--serve-args", default="--max-queue-delay-ms 0",
                   help="more brisk serve flags")
    p.add_argument("--out", type=Path)
    return p.parse_args()


async def one_request(client: httpx.AsyncClient, prompt: str, n: int, seed: int,
                      tokens: int, started: float) -> dict:
    payload = {"prompt": prompt, "n": n, "max_tokens": tokens, "temperature": 1.0, "seed": seed,
               "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    first = {}
    usage = None
    async with client.stream("POST", "/v1/completions", json=payload) as r:
        if r.status_code != 200:
            raise SystemExit(f"HTTP {r.status_code}: {(await r.aread()).decode()}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                if choice.get("text") and choice["index"] not in first:
                    first[choice["index"]] = (time.perf_counter() - started) * 1000
    return {"ttft_ms": list(first.values()), "usage": usage}


async def run_way(port: int, prompts: list[str], n: int, copies: int, tokens: int) -> dict:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*[
            one_request(client, prompt, n, seed=1000 + 10 * i + copy, tokens=tokens,
                        started=started)
            for i, prompt in enumerate(prompts) for copy in range(copies)])
        wall_s = time.perf_counter() - started
    ttfts = sorted(t for r in results for t in r["ttft_ms"])
    completion = sum(r["usage"]["completion_tokens"] for r in results)
    prompt_tokens = sum(r["usage"]["prompt_tokens"] for r in results)
    return {"output_tok_s": completion / wall_s, "wall_s": wall_s,
            "completion_tokens": completion, "prompt_tokens_billed": prompt_tokens,
            "ttft_mean_ms": statistics.mean(ttfts), "ttft_p50_ms": statistics.median(ttfts),
            "ttft_max_ms": ttfts[-1], "choices": len(ttfts)}


def main() -> int:
    args = parse_args()
    port = free_port()
    argv = [str(BRISK), "serve", "--model", args.model, "--port", str(port), "--ctx-size",
            str(args.ctx_size), "--threads", str(args.threads), "--max-seqs", str(args.seqs),
            *args.serve_args.split()]
    rounds = {"n=4 x 4 requests": [], "n=1 x 16 requests": []}
    with tempfile.TemporaryDirectory() as logdir:
        server = start_server("brisk", argv, port, "/ready", logdir)
        try:
            asyncio.run(run_way(port, [prompt_text(999, 50)], 1, 1, 4))  # warm-up
            for r in range(args.rounds):
                for way in (rounds if r % 2 == 0 else reversed(list(rounds))):
                    prompts = [prompt_text(10_000 * (r + 1) + 100 * (way[2] == "4") + i,
                                           args.prompt_words) for i in range(4)]
                    n, copies = (4, 1) if way.startswith("n=4") else (1, 4)
                    result = asyncio.run(run_way(port, prompts, n, copies, args.output_tokens))
                    log(f"round {r} {way}: {result}")
                    rounds[way].append(result)
        finally:
            server.stop()
    summary = {way: {key: statistics.median(x[key] for x in results)
                     for key in results[0]} for way, results in rounds.items()}
    a, b = summary["n=4 x 4 requests"], summary["n=1 x 16 requests"]
    summary["ratio output tok/s (n=4 / separate)"] = a["output_tok_s"] / b["output_tok_s"]
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                        "machine": platform.uname()._asdict(),
                                        "rounds": rounds, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
