#!/usr/bin/env python3
"""`brisk plan --uncalibrated` against published GPU measurements: every point of BENCHMARKS.md's
GPU table, predicted by this build, with its source, and the error (predicted - published) /
published. Two scheduler settings per point: brisk serve's defaults (the planner's premise) and
peer-like (`--target-itl-ms 0 --long-prefill-tokens 0`: prompts packed first come, first served
into the token budget, as vLLM, TensorRT-LLM and NIM do).

  python3 bench/plan_gpu_points.py --out bench/results/plan_gpu_points_DATE.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

NIM = "NVIDIA NIM 1.8.0 docs, Performance: Llama-3.3-70B FP8, 2x H100 TP2, 5000/500, closed loop"
TRT = "TensorRT-LLM perf-overview (v1.0-era docs, trtllm-bench): Llama-3.1-8B FP8, 1000/1000"
LAMBDA = "LambdaLabs vllm-benchmark (vLLM 0.5.4): Llama-3-8B BF16, burst of 10, 137/187"

# (source, setting, plan flags, metric, statistic, published value)
POINTS = [
    (NIM, "c=1", ["--model", "llama-3.1-70b", "--precision", "fp8", "--kv-precision", "fp8",
                  "--devices", "h100-sxm", "--max-devices", "2", "--concurrency", "1", "--isl",
                  "5000", "--osl", "500", "--step-tokens", "8192"], "ttft_ms", "mean", 406.8),
    (NIM, "c=1", None, "tpot_ms", "mean", 18.58),
    (NIM, "c=25", ["--model", "llama-3.1-70b", "--precision", "fp8", "--kv-precision", "fp8",
                   "--devices", "h100-sxm", "--max-devices", "2", "--concurrency", "25", "--isl",
                   "5000", "--osl", "500", "--step-tokens", "8192"], "ttft_ms", "mean", 688.7),
    (NIM, "c=25", None, "tpot_ms", "mean", 38.75),
    (NIM, "c=50", ["--model", "llama-3.1-70b", "--precision", "fp8", "--kv-precision", "fp8",
                   "--devices", "h100-sxm", "--max-devices", "2", "--concurrency", "50", "--isl",
                   "5000", "--osl", "500", "--step-tokens", "8192"], "ttft_ms", "mean", 834.5),
    (NIM, "c=50", None, "tpot_ms", "mean", 59.73),
    (TRT, "1x H100 SXM, 496 at once", ["--model", "llama-3.1-8b", "--precision", "fp8",
                                       "--kv-precision", "fp8", "--devices", "h100-sxm",
                                       "--max-devices", "1", "--isl", "1000", "--osl", "1000",
                                       "--step-tokens", "8192", "--headroom", "0.05",
                                       "--concurrency", "496"],
     "output_tokens_per_s", "", 15220),
    (TRT, "1x H200, 938 at once", ["--model", "llama-3.1-8b", "--precision", "fp8",
                                   "--kv-precision", "fp8", "--devices", "h200", "--max-devices",
                                   "1", "--isl", "1000", "--osl", "1000", "--step-tokens", "8192",
                                   "--headroom", "0.05", "--concurrency", "938"],
     "output_tokens_per_s", "", 17744),
    (LAMBDA, "1x H100 SXM", ["--model", "llama-3-8b", "--precision", "bf16", "--devices",
                             "h100-sxm", "--concurrency", "10", "--burst", "--isl", "137", "--osl",
                             "187", "--step-tokens", "2048"], "ttft_ms", "p50", 62.2),
    (LAMBDA, "1x H100 SXM", None, "tpot_ms", "p50", 7.56),
    (LAMBDA, "1x A100 80GB SXM", ["--model", "llama-3-8b", "--precision", "bf16", "--devices",
                                  "a100-80gb", "--concurrency", "10", "--burst", "--isl", "137",
                                  "--osl", "187", "--step-tokens", "2048"], "ttft_ms", "p50",
     126.7),
    (LAMBDA, "1x A100 80GB SXM", None, "tpot_ms", "p50", 12.01),
]

SETTINGS = {"brisk serve defaults": [],
            "peer-like (FCFS chunks)": ["--target-itl-ms", "0", "--long-prefill-tokens", "0"]}


def predict(brisk: Path, flags: list[str]) -> dict:
    out = subprocess.run([str(brisk), "plan", *flags, "--uncalibrated", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["candidates"][0]


def value(candidate: dict, metric: str, stat: str) -> float:
    if metric == "output_tokens_per_s":
        return candidate["output_token_throughput"]
    return candidate[metric][stat]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brisk-bin", default=str(REPO_ROOT / "build" / "bin" / "brisk"))
    parser.add_argument("--out")
    args = parser.parse_args()
    brisk = Path(args.brisk_bin)
    rows = []
    flags = []
    for source, setting, point_flags, metric, stat, published in POINTS:
        flags = point_flags or flags
        row = {"source": source, "setting": setting, "metric": metric, "statistic": stat,
               "published": published, "command": ["brisk", "plan", *flags, "--uncalibrated"]}
        for name, extra in SETTINGS.items():
            predicted = value(predict(brisk, flags + extra), metric, stat)
            row[name] = {"predicted": predicted, "error": (predicted - published) / published}
        rows.append(row)
    print("| source | setting | metric | published | " +
          " | ".join(f"{name}: predicted, error" for name in SETTINGS) + " |")
    print("|---|---|---|---|" + "---|" * len(SETTINGS))
    for row in rows:
        cells = " | ".join(f"{row[name]['predicted']:.4g} ({row[name]['error']:+.0%})"
                           for name in SETTINGS)
        label = f"{row['metric']} {row['statistic']}".strip()
        print(f"| {row['source'].split(':')[0]} | {row['setting']} | {label} | "
              f"{row['published']:g} | {cells} |")
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
