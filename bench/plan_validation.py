#!/usr/bin/env python3
"""Validates `brisk plan` against measurement on this machine: predict, then measure.

For each model and concurrency C: `brisk plan --concurrency C --burst --json` predicts TTFT and
TPOT on --device; then `brisk serve` runs the model and `brisk bench` sends --bursts separate
bursts of exactly C requests with fixed prompt and output lengths (a closed loop of C users that
ends after one wave, which is what --burst models). Compared: median TTFT and median TPOT over
all measured requests against the predicted p50, as (predicted - measured) / measured.

Run `brisk plan calibrate` for --device first; the script says which efficiencies were used.
Stdlib only; prints a markdown table; --out writes JSON.

  python3 bench/plan_validation.py --device cpu-2vcpu \
      --case gemma3-270m:256:64 --case /tmp/llama-3.1-8b-q4_k_m.gguf:128:32 --concurrency 1,8
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def catalog_with_memory(brisk_repo: Path, device: str, memory_gb: float, work: Path) -> Path:
    """A copy of data/hardware.toml with this machine's memory for `device` (the catalog's
    generic entry may hold less than the machine under test)."""
    text = (brisk_repo / "data" / "hardware.toml").read_text()
    start = text.index(f'id = "{device}"')
    end = text.find("[[device]]", start)
    end = len(text) if end < 0 else end
    block = re.sub(r"memory_gb = [0-9.]+", f"memory_gb = {memory_gb}", text[start:end], count=1)
    path = work / "hardware.toml"
    path.write_text(text[:start] + block + text[end:])
    return path


def calibrate_alone(brisk: Path, model: str, device: str, home: Path,
                    serve_args: list[str]) -> None:
    """`brisk plan calibrate` with this model only, stored under its own BRISK_HOME."""
    home.mkdir(parents=True, exist_ok=True)
    threads = serve_args[serve_args.index("--threads") + 1] if "--threads" in serve_args else "0"
    subprocess.run([str(brisk), "plan", "calibrate", "--model", model, "--device", device,
                    "--threads", threads], check=True, capture_output=True, text=True,
                   env={**os.environ, "BRISK_HOME": str(home)}, timeout=3600)


def predict(brisk: Path, model: str, device: str, users: int, isl: int, osl: int,
            extra: list[str], home: Path | None = None) -> dict:
    argv = [str(brisk), "plan", "--model", model, "--devices", device, "--concurrency", str(users),
            "--burst", "--isl", str(isl), "--osl", str(osl), "--json", *extra]
    env = {**os.environ, "BRISK_HOME": str(home)} if home else None
    candidate = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True,
                                          env=env).stdout)["candidates"][0]
    return {"ttft_ms": candidate["ttft_ms"], "tpot_ms": candidate["tpot_ms"],
            "efficiency": candidate["efficiency"]["origin"]}


def measure(brisk: Path, model: str, users: int, isl: int, osl: int, bursts: int,
            serve_args: list[str], out_dir: Path) -> dict:
    """`bursts` separate bench runs of exactly `users` requests sent at once (after one warm-up
    request), so that every measured request belongs to a burst like the one --burst models;
    statistics over all of them."""
    port = free_port()
    server = subprocess.Popen([str(brisk), "serve", "--model", model, "--port", str(port),
                               "--max-seqs", str(max(users, 1)), *serve_args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ttft_ms, tpot_ms = [], []
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        for burst in range(bursts):
            run_dir = out_dir / f"burst{burst}"
            subprocess.run([str(brisk), "bench", "--url", f"http://127.0.0.1:{port}",
                            "--concurrency", str(users), "--num-requests", str(users),
                            "--warmup-requests", "1", "--input-tokens", str(isl),
                            "--output-tokens", str(osl), "--out", str(run_dir)],
                           check=True, capture_output=True, text=True, timeout=3600)
            with open(run_dir / "requests.csv") as rows:
                for row in csv.DictReader(rows):
                    first, end = float(row["first_token_ms"]), float(row["end_ms"])
                    ttft_ms.append(first - float(row["scheduled_ms"]))
                    tokens = int(row["completion_tokens"])
                    if tokens > 1:
                        tpot_ms.append((end - first) / (tokens - 1))
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {"ttft_ms": {"p50": statistics.median(ttft_ms), "samples": len(ttft_ms)},
            "tpot_ms": {"p50": statistics.median(tpot_ms), "samples": len(tpot_ms)}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brisk-bin", default=str(REPO_ROOT / "build" / "bin" / "brisk"))
    parser.add_argument("--device", required=True, help="catalog id of this machine")
    parser.add_argument("--case", action="append", required=True,
                        help="MODEL:ISL:OSL (a pulled model name or a GGUF path)")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--bursts", type=int, default=3,
                        help="separate bursts of C requests measured per case (C=1: requests)")
    parser.add_argument("--serve-args", default="", help="extra brisk serve flags")
    parser.add_argument("--plan-args", default="", help="extra brisk plan flags")
    parser.add_argument("--work", default="/tmp/plan-validation")
    parser.add_argument("--calibrate-each", action="store_true",
                        help="calibrate with each case's own model (a GGUF path) before "
                             "predicting it, instead of using the stored calibration")
    parser.add_argument("--memory-gb", type=float,
                        help="this machine's memory, replacing the catalog entry's for --device")
    parser.add_argument("--out")
    args = parser.parse_args()
    brisk = Path(args.brisk_bin)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    plan_args = args.plan_args.split()
    if args.memory_gb:
        plan_args += ["--catalog", str(catalog_with_memory(REPO_ROOT, args.device, args.memory_gb,
                                                           Path(args.work)))]
    rows = []
    for case in args.case:
        model, isl, osl = case.rsplit(":", 2)
        home = None
        if args.calibrate_each:
            home = Path(args.work) / f"home-{Path(model).stem}"
            log(f"calibrating {args.device} with {model} alone")
            calibrate_alone(brisk, model, args.device, home, args.serve_args.split())
        for users in [int(c) for c in args.concurrency.split(",")]:
            predicted = predict(brisk, model, args.device, users, int(isl), int(osl), plan_args,
                                home)
            log(f"{model} C={users}: predicted TTFT p50 {predicted['ttft_ms']['p50']:.0f} ms, "
                f"TPOT p50 {predicted['tpot_ms']['p50']:.1f} ms; measuring")
            out_dir = Path(args.work) / f"{Path(model).stem}-c{users}"
            measured = measure(brisk, model, users, int(isl), int(osl), args.bursts,
                               args.serve_args.split(), out_dir)
            row = {"model": model, "isl": int(isl), "osl": int(osl), "concurrency": users,
                   "predicted": predicted, "measured": measured}
            for metric in ("ttft_ms", "tpot_ms"):
                p, m = predicted[metric]["p50"], measured[metric]["p50"]
                row[f"{metric}_error"] = (p - m) / m
            log(f"  measured TTFT p50 {measured['ttft_ms']['p50']:.0f} ms, TPOT p50 "
                f"{measured['tpot_ms']['p50']:.1f} ms over {measured['ttft_ms']['samples']} "
                f"requests")
            rows.append(row)
    print(f"| model | ISL/OSL | C | TTFT p50 predicted | measured | error | TPOT p50 predicted "
          f"| measured | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {Path(r['model']).name} | {r['isl']}/{r['osl']} | {r['concurrency']} | "
              f"{r['predicted']['ttft_ms']['p50']:.0f} ms | {r['measured']['ttft_ms']['p50']:.0f} ms"
              f" | {r['ttft_ms_error']:+.0%} | {r['predicted']['tpot_ms']['p50']:.1f} ms | "
              f"{r['measured']['tpot_ms']['p50']:.1f} ms | {r['tpot_ms_error']:+.0%} |")
    print(f"\nefficiencies: {rows[0]['predicted']['efficiency']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": platform.node(), "rows": rows},
                                             indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
