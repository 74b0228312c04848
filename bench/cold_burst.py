#!/usr/bin/env python3
"""A cold server's first burst (issue 21, benchmark 5): --requests streaming chat requests at once
to a freshly started `brisk serve` with default flags. Do the admitted ones start within
--max-queue-delay-ms (plus one step), and is the excess refused at once with 429 and Retry-After?

Two servers, interleaved, each started fresh for every run:

  warm-up     brisk serve's defaults: step costs measured at start (--warmup)
  no-warmup   the same with --no-warmup: the costs are learned from the requests only, as every
              brisk serve did before the warm-up existed (its first admissions see no cost)
  baseline    --baseline-bin's defaults: another build (an earlier commit) side by side

Each request is a chat turn of a prompt of 20-400 words (uniform, the same list every run) and
--max-tokens tokens (0: none named, the model stops where it stops). Reported per run: admitted,
refused (by error code), the admitted requests' first-token latency (p50, p99, max) measured at
the client, Retry-After values, and the server's decode step at the full batch
(/debug/scheduler) for the "+ one step" of the goal.

  /usr/bin/python3 bench/cold_burst.py --rounds 2 \\
      --out bench/results/cold_burst_2026-12-05/max_tokens_128.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from percentile import percentile  # noqa: E402
from serve_compare import BIN_DIR, free_port, log, median, prompt_text, start_server, write_runs  # noqa: E402

VARIANTS = {"warm-up": [], "no-warmup": ["--no-warmup"], "baseline": []}


def one_request(port: int, model: str, prompt: str, max_tokens: int, gate: threading.Barrier,
                timeout: float) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}
    if max_tokens > 0:
        body["max_tokens"] = max_tokens
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    gate.wait()
    began = time.perf_counter()
    out: dict = {"status": None}
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        out["status"] = resp.status
        if resp.status != 200:
            out["answered_s"] = time.perf_counter() - began
            out["retry_after"] = resp.getheader("Retry-After")
            try:
                out["code"] = json.loads(resp.read())["error"].get("code")
            except (ValueError, KeyError, TypeError):
                out["code"] = None
            return out
        tokens = 0
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
            for choice in json.loads(data).get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    tokens += 1
                    out.setdefault("ttft_s", time.perf_counter() - began)
        out["tokens"] = tokens
        out["end_s"] = time.perf_counter() - began
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = repr(e)
    finally:
        conn.close()
    return out


def get_json(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    except (OSError, http.client.HTTPException, ValueError):
        return {}
    finally:
        conn.close()


def get_text(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return ""
    finally:
        conn.close()


def sample_steps(port: int, every_s: float, stop: threading.Event, out: list[dict]) -> None:
    """Every `every_s` seconds until `stop`: the engine's steps since the last sample (count, mean
    wall time, decodes and prompt tokens a step, from /metrics), the running requests and the KV
    cells in use (/debug/scheduler). What the burst's steps really cost, beside what the warm-up
    measured."""
    names = ("brisk_step_duration_seconds_sum", "brisk_step_duration_seconds_count",
             'brisk_step_tokens_sum{phase="decode"}', 'brisk_step_tokens_sum{phase="prefill"}')
    began = time.perf_counter()
    previous = None
    while not stop.wait(every_s):
        values = {}
        for line in get_text(port, "/metrics").splitlines():
            key, _, value = line.rpartition(" ")
            if key in names:
                values[key] = float(value)
        if len(values) < len(names):
            continue
        current = [values[n] for n in names]
        scheduler = get_json(port, "/debug/scheduler")
        if previous is not None and current[1] > previous[1]:
            steps = current[1] - previous[1]
            out.append({
                "t_s": round(time.perf_counter() - began, 1), "steps": int(steps),
                "mean_step_ms": round((current[0] - previous[0]) / steps * 1000, 1),
                "decodes_per_step": round((current[2] - previous[2]) / steps, 1),
                "prompt_tokens_per_step": round((current[3] - previous[3]) / steps, 1),
                "running": len(scheduler.get("running") or []),
                "kv_used_cells": (scheduler.get("kv") or {}).get("used_cells"),
                "measured": scheduler.get("measured"),
            })
        previous = current


def one_run(args, variant: str, scratch: str, label: str, prompts: list[str]) -> dict:
    port = free_port()
    binary = args.baseline_bin if variant == "baseline" else args.brisk_bin
    argv = [str(binary), "serve", "--model", args.model, "--threads", str(args.threads),
            "--port", str(port), *VARIANTS[variant], *args.server_arg]
    server = start_server(label, argv, port, "/ready", scratch)
    try:
        gate = threading.Barrier(len(prompts))
        results: list[dict] = [{} for _ in prompts]

        def send(i: int) -> None:
            results[i] = one_request(port, args.model, prompts[i], args.max_tokens, gate,
                                     args.timeout)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(prompts))]
        samples: list[dict] = []
        stop_sampling = threading.Event()
        sampler = threading.Thread(target=sample_steps,
                                   args=(port, args.sample_s, stop_sampling, samples))
        if args.sample_s > 0:
            sampler.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop_sampling.set()
        if args.sample_s > 0:
            sampler.join()
        sched = get_json(port, "/debug/scheduler")
        warmup = [line for line in Path(server.log_path).read_text(errors="replace").splitlines()
                  if "warm-up:" in line]
    finally:
        server.stop()
        if args.server_log_dir:
            args.server_log_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(server.log_path, args.server_log_dir / f"{label}.log")
    admitted = [r for r in results if r.get("status") == 200]
    ttfts = sorted(r["ttft_s"] for r in admitted if "ttft_s" in r)
    refused = [r for r in results if r.get("status") == 429]
    codes: dict[str, int] = {}
    for r in refused:
        codes[str(r.get("code"))] = codes.get(str(r.get("code")), 0) + 1
    retry = sorted(int(r["retry_after"]) for r in refused if r.get("retry_after"))
    summary = {
        "variant": variant, "requests": len(prompts), "admitted": len(admitted),
        "refused": len(refused), "refused_by_code": codes,
        "other": len(prompts) - len(admitted) - len(refused),
        "errors": sorted({r.get("error") or str(r.get("status")) for r in results
                          if r.get("status") not in (200, 429)}),
        "ttft_p50_s": percentile(ttfts, 50) if ttfts else None,
        "ttft_p99_s": percentile(ttfts, 99) if ttfts else None,
        "ttft_max_s": ttfts[-1] if ttfts else None,
        "refusal_answered_max_s": max((r["answered_s"] for r in refused), default=None),
        "retry_after_s": {"min": retry[0], "median": retry[len(retry) // 2], "max": retry[-1]}
        if retry else None,
        "decode_step_ms_at_end": (sched.get("measured") or {}).get("decode_step_ms"),
        "tokens": sum(r.get("tokens", 0) for r in admitted),
        "last_end_s": max((r.get("end_s", 0) for r in admitted), default=None),
        "warmup_log": warmup[:1],
        "step_samples": samples,
    }
    log(f"  {label}: admitted {summary['admitted']}, refused {summary['refused']} {codes}, "
        f"TTFT p50 {summary['ttft_p50_s']} p99 {summary['ttft_p99_s']} max "
        f"{summary['ttft_max_s']}, step {summary['decode_step_ms_at_end']} ms")
    summary["per_request"] = results
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--max-tokens", type=int, default=128, help="0: none named")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--variants", default="warm-up,no-warmup",
                        help="of warm-up, no-warmup and baseline (--baseline-bin's defaults)")
    parser.add_argument("--baseline-bin", type=Path,
                        help="another brisk build to compare, run with default flags")
    parser.add_argument("--sample-s", type=float, default=0,
                        help="every this many seconds, record the engine's steps since the last "
                             "sample (/metrics, /debug/scheduler) in the raw file; 0: off")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="one more argument for every server (repeat it)")
    parser.add_argument("--server-log-dir", type=Path, help="keep each server's log here")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    rng = random.Random(21)
    prompts = [prompt_text(i, rng.randint(20, 400)) for i in range(args.requests)]
    variants = args.variants.split(",")
    if "baseline" in variants and not args.baseline_bin:
        parser.error("the baseline variant needs --baseline-bin")
    runs = []
    with tempfile.TemporaryDirectory(prefix="cold-burst-") as scratch:
        for round_index in range(args.rounds):
            order = variants if round_index % 2 == 0 else list(reversed(variants))
            for variant in order:
                label = f"{variant}-r{round_index}"
                log(f"round {round_index}: {variant}")
                run = one_run(args, variant, scratch, label, prompts)
                run["round"] = round_index
                runs.append(run)
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        p99 = [r["ttft_p99_s"] for r in mine if r["ttft_p99_s"] is not None]
        log(f"{variant}: admitted {[r['admitted'] for r in mine]}, refused "
            f"{[r['refused'] for r in mine]}, admitted TTFT p99 median "
            f"{median(p99) if p99 else None} s, max {[r['ttft_max_s'] for r in mine]}")
    write_runs(args.out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
