#!/usr/bin/env python3
"""Reproducible seeds: does the same request with the same seed give the same text? (issue 24)

One request R (a chat, temperature 1, a seed, 64 tokens) sent to a fresh server four ways:
  alone    first, on an empty cache;
  again    right after, when its prompt is in the prefix cache;
  batched  while 7 other requests (other prompts, longer answers) decode beside it;
  after    alone again once they are done (the cache now holds other prompts too).
Each text is compared with `alone`: identical, or the first token (word) where it departs.
Configurations: brisk serve's defaults, --prefix-cache off, --no-kv-unified (one KV stream per
sequence, prefix cache off with it), --max-seqs 1 (one request at a time: never batched), and
llama-server (-np 8) on the same GGUF.

  python3 bench/seed_reproducibility.py --model gemma3-270m --out bench/results/seeds.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from serve_compare import free_port, log, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
BRISK = REPO_ROOT / "build" / "bin" / "brisk"
LLAMA_SERVER = REPO_ROOT / "build" / "bin" / "llama-server"
MODEL_FILES = {"gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
               "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf"}

SYSTEM = "You are a helpful assistant who answers in full sentences."
QUESTION = "Describe a walk through an old city at dawn, street by street."
OTHERS = ["Explain how a bicycle gear works.", "Write a short poem about rain on a tin roof.",
          "List the planets and one fact about each.", "Tell a story about a lost key.",
          "How do bees make honey?", "Describe the taste of a lemon to someone who never had one.",
          "What happens inside a volcano?"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma3-270m", choices=sorted(MODEL_FILES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--out", type=Path)
    return p.parse_args()


def served_model(port: int) -> str:
    r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=30)
    r.raise_for_status()
    return r.json()["data"][0]["id"]


def chat(port: int, question: str, seed: int, tokens: int) -> str:
    body = {"model": served_model(port), "messages": [{"role": "system", "content": SYSTEM},
                                       {"role": "user", "content": question}],
            "temperature": 1.0, "seed": seed, "max_tokens": tokens}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]


def departs_at(reference: str, text: str) -> int | None:
    """None when equal, else the index of the first word that differs."""
    if text == reference:
        return None
    a, b = reference.split(), text.split()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def scenarios(port: int, seed: int, tokens: int) -> dict:
    texts = {"alone": chat(port, QUESTION, seed, tokens)}
    texts["again"] = chat(port, QUESTION, seed, tokens)
    with concurrent.futures.ThreadPoolExecutor(len(OTHERS) + 1) as pool:
        others = [pool.submit(chat, port, q, seed + 1 + i, 4 * tokens)
                  for i, q in enumerate(OTHERS)]
        time.sleep(1.0)  # they are decoding when R arrives
        texts["batched"] = pool.submit(chat, port, QUESTION, seed, tokens).result()
        for f in others:
            f.result()
    texts["after"] = chat(port, QUESTION, seed, tokens)
    return {"texts": texts,
            "departs_at_word": {k: departs_at(texts["alone"], v) for k, v in texts.items()}}


def main() -> int:
    args = parse_args()
    model_file = Path.home() / ".cache" / "brisk" / "models" / MODEL_FILES[args.model]
    configs = {
        "brisk defaults": [],
        "brisk --prefix-cache off": ["--prefix-cache", "off"],
        "brisk --no-kv-unified": ["--no-kv-unified"],
        "brisk --max-seqs 1": ["--max-seqs", "1"],
    }
    results = {}
    with tempfile.TemporaryDirectory() as logdir:
        for name, extra in configs.items():
            port = free_port()
            argv = [str(BRISK), "serve", "--model", args.model, "--port", str(port),
                    "--host", "127.0.0.1", "--threads", str(args.threads),
                    "--ctx-size", "8192", "--max-queue-delay-ms", "0",
                    *(extra if "--max-seqs" in extra else ["--max-seqs", "8", *extra])]
            server = start_server(name.replace(" ", "_"), argv, port, "/ready", logdir)
            try:
                results[name] = scenarios(port, args.seed, args.tokens)
            finally:
                server.stop()
            log(f"{name}: {results[name]['departs_at_word']}")
        port = free_port()
        argv = [str(LLAMA_SERVER), "-m", str(model_file), "--port", str(port), "--host",
                "127.0.0.1", "-t", str(args.threads), "-np", "8", "-c", "8192"]
        server = start_server("llama-server", argv, port, "/health", logdir)
        try:
            results["llama-server -np 8"] = scenarios(port, args.seed, args.tokens)
        finally:
            server.stop()
        log(f"llama-server: {results['llama-server -np 8']['departs_at_word']}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                            capture_output=True, text=True).stdout.strip()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
              "machine": platform.processor() or platform.machine(), "model": args.model,
              "threads": args.threads, "seed": args.seed, "tokens": args.tokens,
              "results": results}
    print("| configuration | again (cached prefix) | batched with 7 | after other traffic |")
    print("|---|---|---|---|")
    for name, result in results.items():
        cells = ["same" if result["departs_at_word"][k] is None
                 else f"departs at word {result['departs_at_word'][k]}"
                 for k in ("again", "batched", "after")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
