#!/usr/bin/env python3
"""Load on demand: what the first request to an unloaded model costs, and whether a loaded
model's requests wait for that load (issue 22, benchmark 2).

Two generative models share one server and the same cores: Gemma 3 270M is loaded and serves a
closed loop of --users users (64-word prompts, 32 tokens out, streamed) the whole run; SmolLM2
135M is not loaded. After --lead seconds one request (128 words, 32 tokens out) names SmolLM2,
which then loads. Reported per run:

  cold_ttft_ms       the SmolLM2 request's TTFT at the client (load + prefill)
  model_load_ms      brisk: the part of it spent waiting for the load (brisk_timings)
  warm_ttft_ms       a second SmolLM2 request right after: TTFT once loaded
  gemma_gap_*        the loaded model's longest silence: the largest gap between two of its
                     streamed tokens (any user) before the cold request, and while it waited
                     for its first token (the load, then its prefill); a loaded model that
                     waited for the load would fall silent for the whole load
  gemma_ttft_*       its TTFT p50 before, and of the requests sent in that window

  brisk          brisk serve --model gemma3-270m --model smollm2-135m, SmolLM2 unloaded with
                 POST /models/unload before the clock starts (its file stays in the page cache)
  llama-router   llama-server --models-dir (router mode): each model loads in a child process on
                 its first request; Gemma is warmed first, SmolLM2 never was

Configurations take turns, the order reversed every other round; medians over --rounds.

  python3 bench/model_load_on_demand.py --rounds 3 \\
      --out bench/results/multi_model_2026-12-05/load_on_demand.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multi_model_isolation import SLOT_CELLS, model_ids  # noqa: E402
from serve_compare import (BIN_DIR, free_port, log, post_json, prompt_text,  # noqa: E402
                           start_server, write_runs)

LOADED = ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf")
COLD = ("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf")
CONFIGS = ["brisk", "llama-router"]


def stream_chat(port: int, model: str, words: int, max_tokens: int, request_id: int) -> dict:
    """One streamed chat: send time, first-token time, end, and brisk_timings if any."""
    body = json.dumps({"model": model, "max_tokens": max_tokens, "stream": True,
                       "messages": [{"role": "user", "content": prompt_text(request_id, words)}]})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    out = {"sent": time.perf_counter(), "first": None, "end": None, "timings": None,
           "error": None, "tokens": []}
    try:
        conn.request("POST", "/v1/chat/completions", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return out
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    out["tokens"].append(time.perf_counter())
                    if out["first"] is None:
                        out["first"] = out["tokens"][-1]
            if chunk.get("brisk_timings"):
                out["timings"] = chunk["brisk_timings"]
        out["end"] = time.perf_counter()
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = repr(e)
    finally:
        conn.close()
    return out


def start(args, config: str, scratch: Path, label: str):
    port = free_port()
    if config == "brisk":
        argv = [str(args.brisk_bin), "serve", "--threads", str(args.threads), "--ctx-size",
                str(args.ctx_size), "--port", str(port), "--model", LOADED[0], "--model",
                COLD[0]]
        server = start_server(label, argv, port, "/ready", str(scratch))
        post_json(port, "/models/unload", {"model": COLD[0]})
        return server, port, {LOADED[0]: LOADED[0], COLD[0]: COLD[0]}
    directory = scratch / f"{label}-models"
    directory.mkdir()
    for _, file in (LOADED, COLD):
        (directory / file).symlink_to(args.models_dir / file)
    argv = [str(args.llama_server_bin), "--models-dir", str(directory), "--models-max", "2",
            "--port", str(port), "-t", str(args.threads), "-np", "4", "-c",
            str(4 * SLOT_CELLS), "--jinja"]
    server = start_server(label, argv, port, "/health", str(scratch))
    ids = model_ids(port)
    names = {name: next(i for i in ids if Path(file).stem.lower() in i.lower()
                        or i.lower() in file.lower())
             for name, file in (LOADED, COLD)}
    return server, port, names


def one_run(args, config: str, scratch: Path, label: str) -> dict:
    server, port, names = start(args, config, scratch, label)
    try:
        warm = stream_chat(port, names[LOADED[0]], 16, 4, 0)  # the router loads it here
        if warm["error"]:
            raise SystemExit(f"{label}: warming {LOADED[0]}: {warm['error']}")
        loop = []
        stop = threading.Event()

        def closed_loop():
            i = 1
            while not stop.is_set():
                loop.append(stream_chat(port, names[LOADED[0]], 64, 32, i))
                i += 1

        users = [threading.Thread(target=closed_loop) for _ in range(args.users)]
        for user in users:
            user.start()
        time.sleep(args.lead)
        cold = stream_chat(port, names[COLD[0]], 128, 32, 10_000)
        warm_again = stream_chat(port, names[COLD[0]], 128, 32, 10_001)
        time.sleep(args.lead)
        stop.set()
        for user in users:
            user.join()
        if cold["error"] or warm_again["error"]:
            raise SystemExit(f"{label}: {cold['error'] or warm_again['error']}")
        window = (cold["sent"], cold["first"])
        before = [r for r in loop if r["first"] and r["sent"] < window[0]
                  and r["end"] < window[0]]
        during = [r for r in loop if r["first"] and window[0] <= r["sent"] < window[1]]
        # A request that was already running when the load began, and ended inside it.
        overlapping = [r for r in loop if r["first"] and r["sent"] < window[0] <= r["end"]]

        def ttfts(rows):
            return [(r["first"] - r["sent"]) * 1000 for r in rows]

        tokens = sorted(t for r in loop for t in r["tokens"])

        def longest_gap(start, end):
            inside = [t for t in tokens if start <= t <= end]
            # The silence from the window's start to its first token counts too.
            edges = [start] + inside + ([end] if inside else [])
            return max((b - a) * 1000 for a, b in zip(edges, edges[1:])) if inside else None

        out = {
            "cold_ttft_ms": (cold["first"] - cold["sent"]) * 1000,
            "model_load_ms": (cold["timings"] or {}).get("model_load_ms"),
            "warm_ttft_ms": (warm_again["first"] - warm_again["sent"]) * 1000,
            "gemma_gap_before_ms": longest_gap(window[0] - args.lead + 1, window[0]),
            "gemma_gap_during_ms": longest_gap(window[0], window[1]),
            "gemma_ttft_before_p50_ms": statistics.median(ttfts(before)) if before else None,
            "gemma_ttft_during_p50_ms": statistics.median(ttfts(during)) if during else None,
            "gemma_ttft_during_max_ms": max(ttfts(during)) if during else None,
            "gemma_requests_during": len(during),
            "gemma_requests_overlapping": len(overlapping),
            "gemma_errors": sum(1 for r in loop if r["error"]),
        }
        log("  " + json.dumps({k: round(v, 1) if isinstance(v, float) else v
                               for k, v in out.items()}))
        return out
    finally:
        server.stop()


def median_of(runs: list[dict], config: str, key: str):
    values = [r[key] for r in runs if r["config"] == config and r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> int:
    home = Path(os.environ.get("BRISK_HOME", Path.home() / ".cache" / "brisk"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--llama-server-bin", type=Path, default=BIN_DIR / "llama-server")
    ap.add_argument("--models-dir", type=Path, default=home / "models")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lead", type=float, default=3.0,
                    help="seconds of the loaded model's load before the cold request, and after")
    ap.add_argument("--users", type=int, default=4, help="closed-loop users of the loaded model")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    configs = args.configs.split(",")
    runs = []
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for round_ in range(args.rounds):
            for config in configs if round_ % 2 == 0 else list(reversed(configs)):
                label = f"{config}-{round_}"
                log(label)
                runs.append({"config": config, "round": round_,
                             **one_run(args, config, scratch, label)})
    keys = ["cold_ttft_ms", "model_load_ms", "warm_ttft_ms", "gemma_gap_before_ms",
            "gemma_gap_during_ms", "gemma_ttft_before_p50_ms", "gemma_ttft_during_p50_ms",
            "gemma_requests_during"]
    print("\n| config | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for config in configs:
        cells = []
        for key in keys:
            value = median_of(runs, config, key)
            cells.append("—" if value is None else f"{value:.0f}")
        print(f"| {config} | " + " | ".join(cells) + " |")
    write_runs(args.out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
