#!/usr/bin/env python3
"""Several models on one device: does a flooded model slow a critical one? (issue 22, benchmark 1)

Gemma 3 270M is the critical model, at a steady 1 request/s (chat, ~128-token prompts, 64 tokens
out); SmolLM2 135M is flooded by a closed loop of 16 users (prompts of 64-512 tokens, 128 out).
Every configuration runs on the same cores (--threads for each engine), a fresh server per run:

  brisk-solo      brisk serve --model gemma3-270m: the critical model alone, its solo figures
  brisk-critical  one brisk serve, --models FILE with gemma critical beside smollm2
  brisk-fair      one brisk serve, --model gemma3-270m --model smollm2-135m (equal shares)
  llama-solo      llama-server on gemma alone
  llama-two       two llama-servers, one per model, on the same cores
  llama-router    llama-server's router mode (--models-dir) serving both

The critical model's p99 TTFT and ITL are compared with its own server's solo run; the flooded
model's output tokens/s says what the isolation cost it. Configurations take turns, the order
reversed every other round; medians over --rounds.

--mode alone (benchmark 3): SmolLM2 under the same closed loop of 16 users, served alone
(brisk serve --model smollm2-135m) and beside an idle Gemma in one server (the device arbiter
then takes a turn every step): output tokens/s of each, and their ratio.

  python3 bench/multi_model_isolation.py --rounds 2 --duration 60 \\
      --out bench/results/multi_model_2026-12-05/isolation.json
  python3 bench/multi_model_isolation.py --mode alone --rounds 3 --duration 60 \\
      --out bench/results/multi_model_2026-12-05/alone.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling_compare import median, pick  # noqa: E402
from serve_compare import BIN_DIR, free_port, log, machine_info, start_server  # noqa: E402

CRITICAL = ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf")
NOISY = ("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf")
CONFIGS = ["brisk-solo", "brisk-critical", "brisk-fair", "llama-solo", "llama-two",
           "llama-router"]
SOLO_OF = {"brisk-critical": "brisk-solo", "brisk-fair": "brisk-solo",
           "llama-two": "llama-solo", "llama-router": "llama-solo"}


def models_file(scratch: Path) -> Path:
    path = scratch / "models.toml"
    path.write_text(f'[[model]]\nmodel = "{CRITICAL[0]}"\ncritical = true\n\n'
                    f'[[model]]\nmodel = "{NOISY[0]}"\n')
    return path


def model_ids(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
        return [m["id"] for m in json.loads(r.read())["data"]]


# llama-server splits -c between its -np slots: 16 slots of 1024 cells hold the flood's longest
# request (512 + 128 tokens); brisk's one buffer of --ctx-size holds them all.
SLOT_CELLS = 1024


def llama_argv(args, model_file: str, port: int, parallel: int) -> list[str]:
    return [str(args.llama_server_bin), "-m", str(args.models_dir / model_file), "--port",
            str(port), "-t", str(args.threads), "-np", str(parallel), "-c",
            str(max(args.ctx_size, parallel * SLOT_CELLS)), "--jinja"]


def start(args, config: str, scratch: Path, label: str) -> tuple[list, dict]:
    """The servers of `config` and where each model is: {model: (port, id)}."""
    brisk = [str(args.brisk_bin), "serve", "--threads", str(args.threads), "--ctx-size",
             str(args.ctx_size)]
    servers = []
    if config.startswith("brisk"):
        port = free_port()
        models = {"brisk-solo": ["--model", CRITICAL[0]],
                  "brisk-critical": ["--models", str(models_file(scratch))],
                  "brisk-fair": ["--model", CRITICAL[0], "--model", NOISY[0]]}[config]
        servers.append(start_server(label, [*brisk, "--port", str(port), *models], port,
                                    "/ready", str(scratch)))
        where = {CRITICAL[0]: (port, CRITICAL[0])}
        if config != "brisk-solo":
            where[NOISY[0]] = (port, NOISY[0])
    elif config in ("llama-solo", "llama-two"):
        port = free_port()
        servers.append(start_server(label + "-critical", llama_argv(args, CRITICAL[1], port, 4),
                                    port, "/health", str(scratch)))
        where = {CRITICAL[0]: (port, CRITICAL[0])}
        if config == "llama-two":
            noisy_port = free_port()
            servers.append(start_server(label + "-noisy", llama_argv(args, NOISY[1], noisy_port, 16),
                                        noisy_port, "/health", str(scratch)))
            where[NOISY[0]] = (noisy_port, NOISY[0])
    else:  # llama-router: both files in one directory, each loaded in a child on first use
        directory = scratch / f"{label}-models"
        directory.mkdir()
        for _, file in (CRITICAL, NOISY):
            (directory / file).symlink_to(args.models_dir / file)
        port = free_port()
        argv = [str(args.llama_server_bin), "--models-dir", str(directory), "--models-max", "2",
                "--port", str(port), "-t", str(args.threads), "-np", "16", "-c",
                str(16 * SLOT_CELLS), "--jinja"]
        servers.append(start_server(label, argv, port, "/health", str(scratch)))
        ids = model_ids(port)
        where = {name: (port, next(i for i in ids if Path(file).stem.lower() in i.lower()
                                   or i.lower() in file.lower()))
                 for name, file in (CRITICAL, NOISY)}
    return servers, where


def bench_argv(args, port: int, model: str, out: Path, load: list[str]) -> list[str]:
    return [str(args.brisk_bin), "bench", "--url", f"http://127.0.0.1:{port}", "--model", model,
            "--endpoint", "chat", "--progress", "off", "--out", str(out), *load]


def one_run(args, config: str, scratch: Path, label: str) -> dict:
    servers, where = start(args, config, scratch, label)
    try:
        noisy = None
        if NOISY[0] in where:
            port, model = where[NOISY[0]]
            # Warm the model (the router loads it on first use) before the clock starts.
            subprocess.run(bench_argv(args, port, model, scratch / f"{label}-warm",
                                      ["--concurrency", "1", "--num-requests", "1",
                                       "--output-tokens", "4"]),
                           check=True, stdout=subprocess.DEVNULL, timeout=600)
            noisy = subprocess.Popen(
                bench_argv(args, port, model, scratch / f"{label}-noisy",
                           ["--concurrency", "16", "--duration", str(args.duration + 15),
                            "--input-tokens", "uniform:64:512", "--output-tokens", "128"]),
                stdout=subprocess.DEVNULL)
            time.sleep(10)  # the flood reaches its steady state first
        port, model = where[CRITICAL[0]]
        critical = bench_argv(args, port, model, scratch / f"{label}-critical",
                              ["--rate", "1", "--arrival", "constant", "--duration",
                               str(args.duration), "--warmup-requests", "2",
                               "--input-tokens", "128", "--output-tokens", "64"])
        log("  " + " ".join(critical))
        subprocess.run(critical, check=True, stdout=subprocess.DEVNULL,
                       timeout=args.duration * 4 + 300)
        run = json.loads((scratch / f"{label}-critical" / "result.json").read_text())["runs"][0]
        out = {"ttft_p50_ms": pick(run, "ttft_ms", "p50"), "ttft_p99_ms": pick(run, "ttft_ms", "p99"),
               "itl_p50_ms": pick(run, "itl_ms", "p50"), "itl_p99_ms": pick(run, "itl_ms", "p99"),
               "critical_requests": pick(run, "requests", "ok"),
               "critical_errors": pick(run, "requests", "failed")}
        if noisy is not None:
            noisy.wait(timeout=args.duration * 4 + 300)
            flood = json.loads((scratch / f"{label}-noisy" / "result.json").read_text())["runs"][0]
            out["noisy_output_tps"] = pick(flood, "output_token_throughput")
            out["noisy_errors"] = pick(flood, "requests", "failed")
        return out
    finally:
        for server in servers:
            server.stop()


def alone(args, scratch: Path) -> list[dict]:
    runs = []
    servings = {"single": ["--model", NOISY[0]], "beside-idle": ["--model", CRITICAL[0], "--model", NOISY[0]]}
    for round_ in range(args.rounds):
        for name in servings if round_ % 2 == 0 else list(reversed(servings)):
            label = f"{name}-{round_}"
            log(label)
            port = free_port()
            server = start_server(label, [str(args.brisk_bin), "serve", "--threads",
                                          str(args.threads), "--ctx-size", str(args.ctx_size),
                                          "--port", str(port), *servings[name]],
                                  port, "/ready", str(scratch))
            try:
                out = scratch / label
                subprocess.run(bench_argv(args, port, NOISY[0], out,
                                          ["--concurrency", "16", "--duration", str(args.duration),
                                           "--input-tokens", "uniform:64:512",
                                           "--output-tokens", "128"]),
                               check=True, stdout=subprocess.DEVNULL, timeout=args.duration * 4 + 300)
            finally:
                server.stop()
            run = json.loads((out / "result.json").read_text())["runs"][0]
            runs.append({"serving": name, "round": round_,
                         "output_tps": pick(run, "output_token_throughput"),
                         "ttft_p99_ms": pick(run, "ttft_ms", "p99"),
                         "itl_p99_ms": pick(run, "itl_ms", "p99"),
                         "errors": pick(run, "requests", "failed")})
    ratios = [b["output_tps"] / a["output_tps"] for a in runs for b in runs
              if a["round"] == b["round"] and a["serving"] == "single"
              and b["serving"] == "beside-idle"]
    print("\n| serving | output tok/s (median) | TTFT p99 ms | ITL p99 ms |\n|---|---|---|---|")
    for name in servings:
        of = [r for r in runs if r["serving"] == name]
        print(f"| {name} | {median([r['output_tps'] for r in of]):.1f} | "
              f"{median([r['ttft_p99_ms'] for r in of]):.0f} | "
              f"{median([r['itl_p99_ms'] for r in of]):.1f} |")
    print(f"\nbeside-idle / single, per round: {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {median(ratios):.3f}")
    return runs


def main() -> int:
    home = Path(os.environ.get("BRISK_HOME", Path.home() / ".cache" / "brisk"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk-bin", type=Path, default=BIN_DIR / "brisk")
    ap.add_argument("--llama-server-bin", type=Path, default=BIN_DIR / "llama-server")
    ap.add_argument("--models-dir", type=Path, default=home / "models")
    ap.add_argument("--mode", choices=["isolation", "alone"], default="isolation")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=60, help="seconds of critical load a run")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--ctx-size", type=int, default=8192)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    configs = args.configs.split(",")
    runs = []
    if args.mode == "alone":
        with tempfile.TemporaryDirectory() as scratch_dir:
            runs = alone(args, Path(scratch_dir))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"machine": machine_info(), "argv": sys.argv,
                                            "date": time.strftime("%Y-%m-%d"), "runs": runs},
                                           indent=2))
        return 0
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for round_ in range(args.rounds):
            for config in configs if round_ % 2 == 0 else list(reversed(configs)):
                label = f"{config}-{round_}"
                log(f"{label}")
                runs.append({"config": config, "round": round_,
                             **one_run(args, config, scratch, label)})

    def med(config, key):
        return median([r.get(key, float("nan")) for r in runs if r["config"] == config])

    print("\n| configuration | critical TTFT p50 / p99 ms | critical ITL p50 / p99 ms | "
          "p99 TTFT / solo | p99 ITL / solo | flooded model tok/s | errors |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for config in configs:
        row = {key: med(config, key) for key in
               ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "noisy_output_tps")}
        row["config"] = config
        solo = SOLO_OF.get(config)
        row["ttft_p99_vs_solo"] = (row["ttft_p99_ms"] / med(solo, "ttft_p99_ms")
                                   if solo in configs else float("nan"))
        row["itl_p99_vs_solo"] = (row["itl_p99_ms"] / med(solo, "itl_p99_ms")
                                  if solo in configs else float("nan"))
        errors = sum(r.get("critical_errors", 0) + r.get("noisy_errors", 0)
                     for r in runs if r["config"] == config)
        rows.append(row)
        print(f"| {config} | {row['ttft_p50_ms']:.0f} / {row['ttft_p99_ms']:.0f} | "
              f"{row['itl_p50_ms']:.1f} / {row['itl_p99_ms']:.1f} | "
              f"{row['ttft_p99_vs_solo']:.2f}x | {row['itl_p99_vs_solo']:.2f}x | "
              f"{row['noisy_output_tps']:.1f} | {errors:g} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine_info(), "argv": sys.argv,
                                        "date": time.strftime("%Y-%m-%d"), "table": rows,
                                        "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
