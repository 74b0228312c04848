#!/usr/bin/env python3
"""A public trace, or chat sessions, against brisk serve and llama-server, side by side (issue
25, benchmark 3): `brisk bench --trace` with the same file, arrivals, lengths and prefix sharing
against each server (or `brisk bench --sessions`: conversations resending their history),
--rounds interleaved rounds (ABBA order), each on a fresh server; the medians of TTFT, E2E,
throughput, (where /metrics tells) the prefix-cache hit rate, and for sessions the mean TTFT of
first turns and of later turns (whose history a cache can serve).

  python3 bench/trace_side_by_side.py --trace data/traces/mooncake_sample.jsonl \
      --out bench/results/trace_mooncake_side_by_side_2026-12-03.json
  python3 bench/trace_side_by_side.py --sessions 6 --turns 6 --think-time 1 \
      --out bench/results/sessions_side_by_side_2026-12-03.json
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import shlex
import statistics
import subprocess
import tempfile
from pathlib import Path

from serve_compare import free_port, log, machine_info, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--brisk", type=Path, default=REPO_ROOT / "build" / "bin" / "brisk")
    p.add_argument("--baseline-brisk", type=Path,
                   help="another brisk binary (an older build), served as `brisk-baseline` with "
                        "brisk's flags; the load is still sent by --brisk's bench")
    p.add_argument("--llama-server", type=Path,
                   default=REPO_ROOT / "build" / "bin" / "llama-server")
    p.add_argument("--model", default="gemma3-270m")
    p.add_argument("--model-file", type=Path,
                   default=Path.home() / ".cache" / "brisk" / "models" / "gemma-3-270m-q4_k_m.gguf")
    p.add_argument("--trace", type=Path, default=REPO_ROOT / "data" / "traces" /
                   "mooncake_sample.jsonl")
    # The sample asks for ~31k prompt tokens in 5 s; stretched 10x it stays near what 2 CPU cores
    # compute, instead of a queue both servers shed or time out.
    p.add_argument("--time-scale", type=float, default=10.0)
    p.add_argument("--sessions", type=int, default=0,
                   help="send chat sessions instead of the trace: this many conversations")
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--think-time", default="1")
    p.add_argument("--system-tokens", type=int, default=0,
                   help="sessions: each conversation's own system prompt")
    p.add_argument("--input-tokens", type=int, default=200, help="each new user message")
    p.add_argument("--output-tokens", type=int, default=64, help="each answer")
    p.add_argument("--servers", default="brisk,llama-server",
                   help="which to compare, in the first round's order: brisk, llama-server, "
                        "brisk-cache-ram-0 (brisk without the prefix cache's host tier), "
                        "brisk-per-seq (brisk --no-kv-unified), brisk-baseline (--baseline-brisk), "
                        "llama-server-per-slot "
                        "(llama-server without --kv-unified: ctx/seqs cells per slot)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                   help="a brisk serve with extra flags, compared as NAME (list it in --servers): "
                        "--variant 'brisk-itl-0=--target-itl-ms 0'")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=16384)
    p.add_argument("--seqs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args()


def start(args, name: str, logdir: str):
    port = free_port()
    variants = dict(v.split("=", 1) for v in args.variant)
    if name.startswith("brisk") or name in variants:
        binary = args.baseline_brisk if name == "brisk-baseline" else args.brisk
        if binary is None:
            raise SystemExit("brisk-baseline needs --baseline-brisk PATH")
        argv = [str(binary), "serve", "--model", args.model, "--port", str(port), "--host",
                "127.0.0.1", "--ctx-size", str(args.ctx_size), "--threads", str(args.threads),
                "--max-seqs", str(args.seqs)]
        argv += {"brisk-cache-ram-0": ["--cache-ram", "0"],
                 "brisk-per-seq": ["--no-kv-unified"]}.get(name, [])
        argv += variants.get(name, "").split()
        return start_server(name, argv, port, "/ready", logdir)
    argv = [str(args.llama_server), "-m", str(args.model_file), "--host", "127.0.0.1", "--port",
            str(port), "-t", str(args.threads), "-c", str(args.ctx_size), "-np", str(args.seqs),
            "--metrics"]
    if name != "llama-server-per-slot":
        # One KV buffer for all slots, as brisk's: otherwise each slot gets ctx/np tokens
        # and the sample's 2-3k-token prompts are refused.
        argv.append("--kv-unified")
    return start_server(name, argv, port, "/health", logdir)


def workload_args(args) -> list[str]:
    if args.sessions:
        return ["--sessions", str(args.sessions), "--turns", str(args.turns), "--think-time",
                args.think_time, "--endpoint", "chat", "--system-tokens", str(args.system_tokens),
                "--input-tokens", str(args.input_tokens),
                "--output-tokens", str(args.output_tokens)]
    return ["--trace", str(args.trace), "--time-scale", str(args.time_scale)]


def replay(args, port: int, out: Path) -> dict:
    argv = [str(args.brisk), "bench", "--url", f"http://127.0.0.1:{port}", "--progress", "off",
            *workload_args(args), "--out", str(out)]
    log("running " + " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"brisk bench failed:\n{proc.stdout}\n{proc.stderr}")
    result = json.loads((out / "result.json").read_text())
    with open(out / "requests.csv") as f:
        result["rows"] = list(csv.DictReader(f))
    return result


def mean_ttft_ms(rows: list[dict], later_turns: bool) -> float | None:
    """Mean TTFT of the session turns that are (or are not) a conversation's first."""
    ttfts = [float(r["first_token_ms"]) - float(r["sent_ms"]) for r in rows
             if r["turn"] and (int(r["turn"]) > 0) == later_turns and r["first_token_ms"]]
    return statistics.mean(ttfts) if ttfts else None


def later_turns_mean(rows: list[dict], column: str) -> float | None:
    """Mean of a server-reported column (requests.csv) over the turns after a conversation's first."""
    values = [float(r[column]) for r in rows
              if r["turn"] and int(r["turn"]) > 0 and r.get(column, "") != ""]
    return statistics.mean(values) if values else None


def figures(result: dict) -> dict:
    run = result["runs"][0]
    server = run["server"] or {}
    return {"ok": run["requests"]["ok"], "failed": run["requests"]["failed"],
            "first_turn_ttft_mean_ms": mean_ttft_ms(result["rows"], later_turns=False),
            "later_turns_ttft_mean_ms": mean_ttft_ms(result["rows"], later_turns=True),
            # The server's own view of the later turns: brisk's queue (arrival to its first
            # step) and TTFT, llama-server's prompt processing; the prompt tokens it reused.
            "later_turns_server_queue_mean_ms": later_turns_mean(result["rows"],
                                                                 "server_queue_ms"),
            "later_turns_server_ttft_mean_ms": later_turns_mean(result["rows"], "server_ttft_ms"),
            "later_turns_cached_tokens_mean": later_turns_mean(result["rows"],
                                                               "cached_prompt_tokens"),
            "later_turns_prompt_tokens_mean": later_turns_mean(result["rows"], "prompt_tokens"),
            "ttft_p50_ms": run["ttft_ms"]["p50"], "ttft_p99_ms": run["ttft_ms"]["p99"],
            "e2e_p50_ms": run["e2e_ms"]["p50"], "e2e_p99_ms": run["e2e_ms"]["p99"],
            "itl_p50_ms": run["itl_ms"]["p50"], "itl_p99_ms": run["itl_ms"]["p99"],
            "output_tok_s": run["output_token_throughput"],
            "duration_s": run["duration_s"],
            "prefix_cache_hit_rate": server.get("prefix_cache_hit_rate")}


def main() -> int:
    args = parse_args()
    logdir = tempfile.mkdtemp(prefix="trace_side-")
    workdir = Path(tempfile.mkdtemp(prefix="trace_side-work-"))
    rounds = []
    names = args.servers.split(",")
    for r in range(args.rounds):
        row = {}
        for name in (names if r % 2 == 0 else list(reversed(names))):
            server = start(args, name, logdir)
            try:
                row[name] = figures(replay(args, server.port, workdir / f"{name}-{r}"))
            finally:
                server.stop()
            log(f"round {r} {name}: {row[name]}")
        rounds.append(row)
    medians = {}
    for name in names:
        medians[name] = {}
        for key in rounds[0][name]:
            values = [row[name][key] for row in rounds if row[name][key] is not None]
            medians[name][key] = statistics.median(values) if values else None
    result = {
        "command": "python3 bench/trace_side_by_side.py " + " ".join(
            f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, values in vars(args).items()
            if k not in ("brisk", "baseline_brisk", "llama_server", "model_file")
            for v in (values if isinstance(values, list) else [values])),
        "date": datetime.date.today().isoformat(),
        "machine": machine_info(),
        "rounds": rounds,
        "medians": medians,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(medians, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
