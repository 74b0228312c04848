#!/usr/bin/env python3
"""/v1/embeddings: brisk serve's dynamic batcher against llama-server --embeddings (issue 23).

Two measurements, each with a fresh server per run, the same GGUF (all-MiniLM-L6-v2, F16) and the
same threads:

  table   closed loop at each --concurrency and --inputs (inputs per request), ~64-token inputs:
          brisk serve (batches of up to 64 inputs / 4096 tokens, --batch-window-ms 0) and
          llama-server --embeddings -np 64 -b 4096 -ub 4096 (the same batch capacity), taking
          turns, the order reversed every other round. Medians of --rounds rounds; the ratio is
          the median of each round's brisk / llama-server.
  window  brisk alone at a fixed Poisson --rate of one-input requests, one run per
          --batch-window-ms value: p50/p95/p99 end-to-end, throughput, and the mean batch size
          from brisk's /metrics (brisk_embedding_batch_inputs).

  python3 bench/embeddings_compare.py table --concurrency 1,8,32,128 --inputs 1,16 --rounds 2 \
      --out bench/results/embeddings_table.json
  python3 bench/embeddings_compare.py window --rate 40 --windows 0,1,2,5,10,20 --rounds 2 \
      --out bench/results/embeddings_window.json

--endpoint rerank runs the table on /v1/rerank instead: a reranker GGUF (--model-path; by default
the test reranker scripts/make_test_reranker.py makes from all-MiniLM-L6-v2's encoder), brisk serve
--model FILE against llama-server --reranking, --inputs documents per request with a 16-token
query (brisk bench --endpoint rerank); a document is one input of either server's batch.

  python3 bench/embeddings_compare.py table --endpoint rerank --concurrency 1,8,32,128 \
      --inputs 16 --rounds 2 --out bench/results/rerank_table.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling_compare import median, pick, write_out  # noqa: E402
from serve_compare import BIN_DIR, free_port, log, start_server  # noqa: E402

MODEL = "all-minilm-l6-v2"
SERVERS = ["brisk", "llama-server"]


def served_model(args) -> str:
    return MODEL if args.endpoint == "embeddings" else args.model_path.stem


def server_argv(name: str, args: argparse.Namespace, port: int, window_ms: float = 0):
    if name == "brisk":
        model = MODEL if args.endpoint == "embeddings" else str(args.model_path)
        return ([str(args.brisk_bin), "serve", "--model", model, "--port", str(port),
                 "--threads", str(args.threads), "--batch-window-ms", str(window_ms),
                 "--max-queued-inputs", "65536"], "/ready")
    # -np 64 slots of 512 cells (the model's context): as many inputs at once as brisk's
    # --max-batch-inputs; llama-server's own batch sizes (-b 2048, -ub 512).
    return ([str(args.llama_server_bin), "-m", str(args.model_path),
             "--embeddings" if args.endpoint == "embeddings" else "--reranking",
             "--port", str(port), "-t", str(args.threads), "-np", "64", "-c", "32768"],
            "/health")


def batch_metrics(port: int) -> tuple[float, float]:
    """brisk's brisk_embedding_batch_inputs (sum, count)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for name in ("brisk_embedding_batch_inputs_sum", "brisk_embedding_batch_inputs_count"):
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        values[name] = float(match.group(1)) if match else float("nan")
    return values["brisk_embedding_batch_inputs_sum"], values["brisk_embedding_batch_inputs_count"]


def run_bench(args, port: int, out_dir: Path, load: list[str], inputs: int) -> dict:
    argv = [str(args.brisk_bin), "bench", "--url", f"http://127.0.0.1:{port}",
            "--model", served_model(args), "--endpoint", args.endpoint,
            "--inputs-per-request", str(inputs),
            "--input-tokens", str(args.input_tokens), "--progress", "off", "--out", str(out_dir),
            *load]
    log("  " + " ".join(argv))
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    return json.loads((out_dir / "result.json").read_text())["runs"][0]


def numbers(run: dict) -> dict:
    return {
        "embeddings_per_s": pick(run, "embedding_throughput"),
        "requests_per_s": pick(run, "request_throughput"),
        "input_tokens_per_s": pick(run, "input_token_throughput"),
        "e2e_p50_ms": pick(run, "e2e_ms", "p50"),
        "e2e_p95_ms": pick(run, "e2e_ms", "p95"),
        "e2e_p99_ms": pick(run, "e2e_ms", "p99"),
        "errors": pick(run, "requests", "failed"),
    }


def one_run(args, name: str, scratch: str, label: str, load: list[str], inputs: int,
            window_ms: float = 0) -> dict:
    port = free_port()
    argv, ready = server_argv(name, args, port, window_ms)
    handle = start_server(name, argv, port, ready, scratch)
    try:
        before = batch_metrics(port) if name == "brisk" else None
        run = run_bench(args, port, Path(scratch) / label, load, inputs)
        after = batch_metrics(port) if name == "brisk" else None
    finally:
        handle.stop()
        time.sleep(1)
    result = numbers(run)
    result["mean_batch_inputs"] = (
        (after[0] - before[0]) / (after[1] - before[1])
        if before and after and after[1] > before[1] else float("nan"))
    log(f"  {label}: {result}")
    return result


def table(args) -> None:
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            for inputs in [int(i) for i in args.inputs.split(",")]:
                # Enough requests that every client sends several and ~600 vectors come back.
                requests = max(4 * concurrency, args.vectors // inputs)
                load = ["--concurrency", str(concurrency), "--num-requests", str(requests),
                        "--warmup-requests", str(min(concurrency, 8))]
                for round_ in range(args.rounds):
                    for name in SERVERS if round_ % 2 == 0 else list(reversed(SERVERS)):
                        label = f"c{concurrency}-i{inputs}-{name}-{round_}"
                        runs.append({"concurrency": concurrency, "inputs": inputs, "server": name,
                                     "round": round_,
                                     **one_run(args, name, scratch, label, load, inputs)})

    def med(c, i, server, key):
        return median([r[key] for r in runs
                       if (r["concurrency"], r["inputs"], r["server"]) == (c, i, server)])

    def ratio(c, i, key):
        pairs = [a[key] / b[key] for a in runs for b in runs
                 if (a["concurrency"], a["inputs"], a["round"]) == (b["concurrency"], b["inputs"], b["round"])
                 == (c, i, a["round"]) and a["server"] == "brisk" and b["server"] == "llama-server"
                 and b[key] > 0]
        return median(pairs)

    unit = "vectors/s" if args.endpoint == "embeddings" else "documents/s"
    print(f"\n| clients | inputs/request | brisk {unit} | llama-server {unit} | brisk / llama |"
          " p99 ms brisk / llama | p50 ms brisk / llama | brisk mean batch | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for c, i in sorted({(r["concurrency"], r["inputs"]) for r in runs}):
        row = {"concurrency": c, "inputs": i,
               "brisk": med(c, i, "brisk", "embeddings_per_s"),
               "llama": med(c, i, "llama-server", "embeddings_per_s"),
               "ratio": ratio(c, i, "embeddings_per_s"),
               "p99": (med(c, i, "brisk", "e2e_p99_ms"), med(c, i, "llama-server", "e2e_p99_ms")),
               "p50": (med(c, i, "brisk", "e2e_p50_ms"), med(c, i, "llama-server", "e2e_p50_ms")),
               "batch": med(c, i, "brisk", "mean_batch_inputs")}
        rows.append(row)
        errors = sum(r["errors"] for r in runs if (r["concurrency"], r["inputs"]) == (c, i))
        print(f"| {c} | {i} | {row['brisk']:.1f} | {row['llama']:.1f} | {row['ratio']:.2f}x | "
              f"{row['p99'][0]:.0f} / {row['p99'][1]:.0f} | {row['p50'][0]:.0f} / {row['p50'][1]:.0f} | "
              f"{row['batch']:.1f} | {errors:g} |")
    write_out(args, rows, runs)


def window(args) -> None:
    runs = []
    windows = [float(w) for w in args.windows.split(",")]
    load = ["--rate", str(args.rate), "--arrival", "poisson", "--num-requests",
            str(args.num_requests), "--warmup-requests", "8"]
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for window_ms in windows if round_ % 2 == 0 else list(reversed(windows)):
                label = f"w{window_ms:g}-{round_}"
                runs.append({"window_ms": window_ms, "round": round_,
                             **one_run(args, "brisk", scratch, label, load, 1, window_ms)})
    print(f"\nPoisson {args.rate:g} requests/s of one ~{args.input_tokens}-token input each:\n")
    print("| window ms | p50 ms | p95 ms | p99 ms | vectors/s | mean batch | errors |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for w in windows:
        of = [r for r in runs if r["window_ms"] == w]
        row = {k: median([r[k] for r in of]) for k in
               ("e2e_p50_ms", "e2e_p95_ms", "e2e_p99_ms", "embeddings_per_s", "mean_batch_inputs")}
        row["window_ms"] = w
        rows.append(row)
        print(f"| {w:g} | {row['e2e_p50_ms']:.1f} | {row['e2e_p95_ms']:.1f} | {row['e2e_p99_ms']:.1f} | "
              f"{row['embeddings_per_s']:.1f} | {row['mean_batch_inputs']:.2f} | "
              f"{sum(r['errors'] for r in of):g} |")
    write_out(args, rows, runs)


def main() -> int:
    home = Path(os.environ.get("BRISK_HOME", Path.home() / ".cache" / "brisk"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["table", "window"])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--llama-server-bin", type=Path, default=BIN_DIR / "llama-server")
    ap.add_argument("--endpoint", choices=["embeddings", "rerank"], default="embeddings")
    ap.add_argument("--model-path", type=Path,
                    help="default: all-MiniLM-L6-v2's GGUF; with --endpoint rerank, the test "
                         "reranker made from it")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--input-tokens", type=int, default=64)
    ap.add_argument("--concurrency", default="1,8,32,128")
    ap.add_argument("--inputs", default="1,16")
    ap.add_argument("--vectors", type=int, default=600, help="table: vectors per run, at least")
    ap.add_argument("--rate", type=float, default=40.0, help="window: Poisson requests/s")
    ap.add_argument("--windows", default="0,1,2,5,10,20")
    ap.add_argument("--num-requests", type=int, default=400, help="window: requests per run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    encoder = home / "models" / "all-MiniLM-L6-v2-f16.gguf"
    with tempfile.TemporaryDirectory() as made:
        if args.model_path is None and args.endpoint == "rerank":
            repo = Path(__file__).resolve().parents[1]
            args.model_path = Path(made) / "test-reranker.gguf"
            subprocess.run(["/usr/bin/python3", str(repo / "scripts" / "make_test_reranker.py"),
                            "--gguf-py", str(repo / ".deps" / "llama.cpp" / "gguf-py"),
                            str(encoder), str(args.model_path)], check=True)
        args.model_path = args.model_path or encoder
        if args.endpoint == "rerank" and args.mode == "window":
            ap.error("window measures /v1/embeddings only")
        table(args) if args.mode == "table" else window(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
