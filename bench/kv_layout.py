#!/usr/bin/env python3
"""brisk serve's two KV layouts against llama-server, by concurrent streams (issue 21).

For each stream count N and round, three servers take turns on the same model file, threads and
total KV cells (--ctx-size max(8192, 320 N)), each started fresh:

  brisk-unified   brisk serve's one KV buffer for all sequences (--kv-unified)
  brisk-per-seq   brisk serve --no-kv-unified: each sequence has ctx/N cells of its own
  llama-server    -np N (its per-slot buffers: ctx/N cells each)
  (on request: brisk-per-seq-cache-off, --no-kv-unified --prefix-cache off; brisk-unified-one-call,
   --kv-unified --cpu-attention-rows 0: every step in one llama_decode call, as before 2026-12-05)

`brisk bench` sends one wave of N requests at once (closed loop, concurrency N, after a warm-up
of min(N, 8)), 128 prompt tokens, 128 output tokens (ignore_eos), no sampling parameters. Both
brisk servers run with --max-queue-delay-ms 0: this measures what a step costs, and a refusal
by the admission estimate would take requests out of the comparison. The order of the servers
is reversed every other round.

Prints a markdown table of medians (output tok/s, ITL p50) and ratios to llama-server; --out
writes every run as JSON.

  python3 bench/kv_layout.py --streams 1,16,64,128 --rounds 2 --out bench/results/kv_layout.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling_compare import row_numbers, run_bench, write_out  # noqa: E402
from serve_compare import BIN_DIR, free_port, log, start_server  # noqa: E402

SERVERS = ["brisk-unified", "brisk-per-seq", "llama-server"]


def server_argv(name: str, args: argparse.Namespace, streams: int, port: int):
    ctx = max(8192, 320 * streams)
    if name.startswith("brisk"):
        layout = {"brisk-unified": ["--kv-unified"], "brisk-per-seq": ["--no-kv-unified"],
                  "brisk-per-seq-cache-off": ["--no-kv-unified", "--prefix-cache", "off"],
                  "brisk-unified-one-call": ["--kv-unified", "--cpu-attention-rows", "0"]}[name]
        return ([str(args.brisk_bin), "serve", "--model", args.model, "--port", str(port),
                 "--threads", str(args.threads), "--ctx-size", str(ctx), "--max-seqs",
                 str(streams), "--max-queued-requests", "4096", "--max-queue-delay-ms", "0",
                 *layout, *args.brisk_args.split()], "/ready")
    return ([str(args.llama_server_bin), "-m", str(args.model_path), "--port", str(port),
             "-t", str(args.threads), "-c", str(ctx), "-np", str(streams)], "/health")


def main() -> int:
    home = Path(os.environ.get("BRISK_HOME", Path.home() / ".cache" / "brisk"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--llama-server-bin", type=Path, default=BIN_DIR / "llama-server")
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--model-path", type=Path, default=home / "models" / "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", default="1,16,64,128")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--brisk-args", default="", help="extra flags for both brisk servers")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    runs: list[dict] = []
    servers = args.servers.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        for streams in [int(s) for s in args.streams.split(",")]:
            bench = argparse.Namespace(
                brisk_bin=args.brisk_bin, concurrency=streams, num_requests=streams,
                input_tokens=128, output_tokens=128, warmup_requests=min(streams, 8))
            for round_ in range(args.rounds):
                for name in servers if round_ % 2 == 0 else list(reversed(servers)):
                    port = free_port()
                    argv, ready = server_argv(name, args, streams, port)
                    handle = start_server(name, argv, port, ready, scratch)
                    try:
                        run = run_bench(bench, port, [], Path(scratch) / f"{streams}-{name}-{round_}")
                    finally:
                        handle.stop()
                        time.sleep(1)
                    numbers = row_numbers(run)
                    log(f"  {streams} streams, {name} #{round_}: {numbers}")
                    runs.append({"streams": streams, "server": name, "round": round_, **numbers})

    def med(streams: int, server: str, key: str) -> float:
        values = [r[key] for r in runs if r["streams"] == streams and r["server"] == server]
        values = [v for v in values if v == v]
        return statistics.median(values) if values else float("nan")

    def ratio(streams: int, server: str) -> float:
        pairs = [a["output_tps"] / b["output_tps"] for a in runs for b in runs
                 if a["streams"] == b["streams"] == streams and a["round"] == b["round"]
                 and a["server"] == server and b["server"] == "llama-server"]
        return statistics.median(pairs) if pairs else float("nan")

    print("\n| streams | " + " | ".join(f"{s} tok/s" for s in servers)
          + " | unified / llama | per-seq / llama | ITL p50 ms (" + " / ".join(servers) + ") | errors |")
    print("|---" * (len(servers) + 5) + "|")
    table = []
    for streams in sorted({r["streams"] for r in runs}):
        row = {s: med(streams, s, "output_tps") for s in servers}
        row.update(streams=streams, unified_ratio=ratio(streams, "brisk-unified"),
                   per_seq_ratio=ratio(streams, "brisk-per-seq"))
        table.append(row)
        errors = sum(r["errors"] for r in runs if r["streams"] == streams)
        print(f"| {streams} | " + " | ".join(f"{row[s]:.1f}" for s in servers)
              + f" | {row['unified_ratio']:.2f}x | {row['per_seq_ratio']:.2f}x | "
              + " / ".join(f"{med(streams, s, 'itl_p50_ms'):.0f}" for s in servers)
              + f" | {errors:g} |")
    write_out(args, table, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
