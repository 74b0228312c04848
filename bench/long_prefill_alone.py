#!/usr/bin/env python3
"""A long prompt prefilled while nothing decodes: what cutting its chunks to --target-itl-ms costs
the long prompt, and what it saves a short request that arrives during it (issue 27).

Two brisk binaries (--baseline and --candidate, e.g. a build of the commit before and after),
each in a fresh server with the same flags, taking turns within each round (--rounds). In each
server, after a warm-up that lets the scheduler measure its step costs:
  - long alone: a --long-tokens prompt with 1 token out, nothing else running: its TTFT;
  - doctor's long: a 320-token prompt alone, the same (brisk doctor's long baseline);
  - short during long: the long prompt again, and --short-delay-ms after it a 32-token prompt
    with 1 token out: the short one's TTFT.
Every prompt is distinct (no prefix-cache hit). TTFT is the server's own (`brisk_timings`).
Prints medians per binary and candidate/baseline ratios; --out writes every measurement.

  python3 bench/long_prefill_alone.py --baseline /path/old/brisk --candidate build/bin/brisk \\
      --rounds 3 --out bench/results/long_prefill_alone.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

from serve_compare import (calibrate_words, free_port, llama_token_count, log, post_json,
                           prompt_text, start_server)

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", type=Path, required=True, help="brisk binary to compare against")
    p.add_argument("--candidate", type=Path, default=REPO_ROOT / "build" / "bin" / "brisk")
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=8192)
    p.add_argument("--long-tokens", type=int, default=2900)
    p.add_argument("--short-delay-ms", type=float, default=150)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path)
    return p.parse_args()


def ttft_ms(port: int, text: str) -> float:
    body = post_json(port, "/v1/completions",
                     {"prompt": text, "max_tokens": 1, "temperature": 0, "ignore_eos": True})
    if body["usage"].get("prompt_tokens_details", {}).get("cached_tokens"):
        raise SystemExit("a measured prompt hit the prefix cache")
    return float(body["brisk_timings"]["ttft_ms"])


def measure(port: int, words: dict[str, int], first_id: int) -> dict[str, float]:
    next_id = iter(range(first_id, first_id + 100))
    # Warm-up: decode steps (a step's fixed cost) and prompt steps (a token's cost) measured.
    post_json(port, "/v1/completions", {"prompt": prompt_text(next(next_id), words["short"]),
                                        "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    ttft_ms(port, prompt_text(next(next_id), words["doctor"]))
    result = {
        "long_alone_ttft_ms": ttft_ms(port, prompt_text(next(next_id), words["long"])),
        "doctor_long_ttft_ms": ttft_ms(port, prompt_text(next(next_id), words["doctor"])),
    }
    long_text = prompt_text(next(next_id), words["long"])
    short_text = prompt_text(next(next_id), words["short"])
    long_thread = threading.Thread(target=ttft_ms, args=(port, long_text))
    long_thread.start()
    time.sleep(args.short_delay_ms / 1000)
    result["short_during_long_ttft_ms"] = ttft_ms(port, short_text)
    long_thread.join()
    return result


def main() -> None:
    binaries = {"baseline": args.baseline, "candidate": args.candidate}
    runs: list[dict] = []
    words: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as logdir:
        for round_index in range(args.rounds):
            order = list(binaries) if round_index % 2 == 0 else list(reversed(binaries))
            for name in order:
                port = free_port()
                server = start_server(
                    f"{name}-{round_index}",
                    [str(binaries[name]), "serve", "--model", args.model, "--port", str(port),
                     "--threads", str(args.threads), "--ctx-size", str(args.ctx_size)],
                    port, "/health", logdir)
                try:
                    if not words:
                        count = lambda text: llama_token_count(port, text)  # noqa: E731
                        words = {"long": calibrate_words(count, args.long_tokens),
                                 "doctor": calibrate_words(count, 320),
                                 "short": calibrate_words(count, 32)}
                    measured = measure(port, words, first_id=1000 * (round_index + 1))
                finally:
                    server.stop()
                log(f"round {round_index} {name}: {measured}")
                runs.append({"round": round_index, "binary": name, **measured})

    keys = ["long_alone_ttft_ms", "doctor_long_ttft_ms", "short_during_long_ttft_ms"]
    medians = {name: {k: statistics.median(r[k] for r in runs if r["binary"] == name)
                      for k in keys} for name in binaries}
    ratios = {k: medians["candidate"][k] / medians["baseline"][k] for k in keys}
    print(f"{'':28} {'baseline':>10} {'candidate':>10} {'ratio':>7}")
    for k in keys:
        print(f"{k:28} {medians['baseline'][k]:10.0f} {medians['candidate'][k]:10.0f} "
              f"{ratios[k]:7.2f}")
    if args.out:
        args.out.write_text(json.dumps({
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": platform.processor() or platform.machine(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "runs": runs, "medians": medians, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    args = parse_args()
    main()
