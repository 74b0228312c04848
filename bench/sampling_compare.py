#!/usr/bin/env python3
"""Output throughput of `brisk serve` against `llama-server` at the sampling settings clients send.

For each setting and repeat, each server is started alone on the same model file, threads,
context and sequence count (llama-server otherwise with its defaults: one KV stream per slot),
then `brisk bench` drives it (closed loop, --concurrency streams,
128 prompt tokens and 128 output tokens by default, ignore_eos). Servers take turns: brisk,
llama-server, brisk, ... so both see the same machine state. Settings:

  nothing   no sampling key sent: each server's own default (brisk: OpenAI's temperature 1 over
            the whole distribution; llama-server: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05)
  greedy    temperature 0
  full      temperature 1, top_k 0, top_p 1, min_p 0 sent to both: the whole distribution
  llama     temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 sent to both
  penalties presence_penalty 0.5 and frequency_penalty 0.5, nothing else
  repeat    llama, and repeat_penalty 1.1 over repeat_last_n 64

Prints a markdown table of medians (output tokens/s, TTFT p50, ITL p50/p99) and brisk/llama-server
ratios; --out writes every run's numbers as JSON, and --keep-results keeps brisk bench's
result.json files.

  python3 bench/sampling_compare.py --repeats 2 --out bench/results/sampling_compare.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_compare import BIN_DIR, free_port, log, machine_info, start_server  # noqa: E402

SETTINGS = {
    "nothing": [],
    "greedy": ["--temperature", "0"],
    "full": ["--temperature", "1", "--top-k", "0", "--top-p", "1", "--min-p", "0"],
    "llama": ["--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05"],
    # What OpenAI SDK users send: nothing else, and OpenAI's penalties.
    "penalties": ["--extra-body", '{"presence_penalty": 0.5, "frequency_penalty": 0.5}'],
    # llama-server's defaults with its repeat penalty (over the last 64 tokens).
    "repeat": ["--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05",
               "--extra-body", '{"repeat_penalty": 1.1, "repeat_last_n": 64}'],
}


def server_argv(name: str, args: argparse.Namespace, port: int) -> tuple[list[str], str]:
    if name in ("brisk", "brisk-before"):
        binary = args.brisk_bin if name == "brisk" else args.before_bin
        return ([str(binary), "serve", "--model", args.model, "--port", str(port),
                 "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                 "--max-seqs", str(args.seqs), "--max-queued-requests", "4096",
                 *args.brisk_args.split()], "/ready")
    return ([str(args.llama_server_bin), "-m", str(args.model_path), "--port", str(port),
             "-t", str(args.threads), "-c", str(args.ctx_size), "-np", str(args.seqs),
             *args.llama_server_args.split()], "/health")


def run_bench(args: argparse.Namespace, port: int, setting: list[str], out_dir: Path) -> dict:
    argv = [str(args.brisk_bin), "bench", "--url", f"http://127.0.0.1:{port}",
            "--concurrency", str(args.concurrency), "--num-requests", str(args.num_requests),
            "--input-tokens", str(args.input_tokens), "--output-tokens", str(args.output_tokens),
            "--warmup-requests", str(args.warmup_requests if args.warmup_requests >= 0
                                     else args.concurrency), "--progress", "off",
            "--out", str(out_dir), *setting]
    log("  " + " ".join(argv))
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    result = json.loads((out_dir / "result.json").read_text())
    return {"result": result, "summary": result["runs"][0]}


def pick(summary: dict, *path: str) -> float:
    value = summary
    for key in path:
        if not isinstance(value, dict) or key not in value or value[key] is None:
            return float("nan")
        value = value[key]
    return float(value)


def row_numbers(run: dict) -> dict:
    s = run["summary"]
    return {
        "output_tps": pick(s, "output_token_throughput"),
        "ttft_p50_ms": pick(s, "ttft_ms", "p50"),
        "itl_p50_ms": pick(s, "itl_ms", "p50"),
        "itl_p99_ms": pick(s, "itl_ms", "p99"),
        "tpot_p50_ms": pick(s, "tpot_ms", "p50"),
        "errors": pick(s, "requests", "failed"),
    }


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def write_out(args: argparse.Namespace, table: list[dict], runs: list[dict]) -> None:
    """--out: the machine, the arguments, the table of medians and every run, as JSON."""
    if not args.out:
        return
    args.out.write_text(json.dumps({"machine": machine_info(), "args": {
        k: str(v) for k, v in vars(args).items()}, "table": table, "runs": runs}, indent=1))
    log(f"wrote {args.out}")


def parse_args() -> argparse.Namespace:
    home = Path(os.environ.get("BRISK_HOME", Path.home() / ".cache" / "brisk"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--llama-server-bin", type=Path, default=BIN_DIR / "llama-server")
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--model-path", type=Path, default=home / "models" / "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=8192)
    ap.add_argument("--seqs", type=int, default=16, help="brisk --max-seqs, llama-server -np")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--warmup-requests", type=int, default=-1,
                    help="brisk bench --warmup-requests (default: one per stream)")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma list of " + ",".join(SETTINGS))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--brisk-args", default="")
    ap.add_argument("--llama-server-args", default="")
    ap.add_argument("--before-bin", type=Path,
                    help="an older brisk binary, run as a third server 'brisk-before'")
    ap.add_argument("--before-settings", default="",
                    help="settings at which brisk-before runs (default: every one)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep-results", type=Path, help="directory for every run's result.json")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    settings = args.settings.split(",")
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for setting in settings:
                servers = ["brisk", "llama-server"]
                if args.before_bin and (not args.before_settings
                                        or setting in args.before_settings.split(",")):
                    servers.append("brisk-before")
                for server in servers:
                    port = free_port()
                    argv, ready = server_argv(server, args, port)
                    handle = start_server(server, argv, port, ready, scratch)
                    try:
                        out_dir = (args.keep_results or Path(scratch)) / f"{setting}-{server}-{repeat}"
                        run = run_bench(args, port, SETTINGS[setting], out_dir)
                    finally:
                        handle.stop()
                        time.sleep(1)
                    numbers = row_numbers(run)
                    log(f"  {setting} {server} #{repeat}: {numbers}")
                    runs.append({"setting": setting, "server": server, "repeat": repeat,
                                 **numbers, "workload": run["result"].get("workload")})

    print(f"\n{args.concurrency} streams, {args.input_tokens} in / {args.output_tokens} out, "
          f"{args.num_requests} requests, medians of {args.repeats}\n")
    print("| setting | brisk tok/s | llama-server tok/s | ratio | TTFT p50 ms (b / l) "
          "| ITL p50 ms (b / l) | ITL p99 ms (b / l) | decode tok/s per stream (b / l) |")
    print("|---|---|---|---|---|---|---|---|")
    table = []
    for setting in settings:
        def med(server: str, key: str) -> float:
            return median([r[key] for r in runs if r["setting"] == setting and r["server"] == server])
        b, l = med("brisk", "output_tps"), med("llama-server", "output_tps")
        ratios = [rb["output_tps"] / rl["output_tps"] for rb in runs for rl in runs
                  if rb["setting"] == rl["setting"] == setting and rb["repeat"] == rl["repeat"]
                  and rb["server"] == "brisk" and rl["server"] == "llama-server"]
        ratio = median(ratios)
        before = med("brisk-before", "output_tps")
        table.append({"setting": setting, "brisk_tps": b, "llama_server_tps": l, "ratio": ratio,
                      "brisk_before_tps": before})
        print(f"| {setting} | {b:.1f} | {l:.1f} | {ratio:.2f}x "
              f"| {med('brisk', 'ttft_p50_ms'):.0f} / {med('llama-server', 'ttft_p50_ms'):.0f} "
              f"| {med('brisk', 'itl_p50_ms'):.1f} / {med('llama-server', 'itl_p50_ms'):.1f} "
              f"| {med('brisk', 'itl_p99_ms'):.0f} / {med('llama-server', 'itl_p99_ms'):.0f} "
              f"| {1000 / med('brisk', 'tpot_p50_ms'):.1f} / "
              f"{1000 / med('llama-server', 'tpot_p50_ms'):.1f} |"
              + (f" before: {before:.1f} tok/s" if before == before else ""))
    write_out(args, table, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
